"""Pipeline stages (torchtitan's manual split): one stage per rank; or FSDP2 inside each stage
on a (stages, dp) mesh. Every stage of one pipeline trains on the same batches."""

from __future__ import annotations

from dataclasses import dataclass

from conformance.case import Case
from conformance.layout.base import Layout, case_mesh, models_without
from conformance.strategy.builtin import STATE_APIS
from conformance.strategy.pipeline import InterleavedWrapper, PipelineFsdpWrapper, PipelineWrapper
from conformance.strategy.storage import STORAGES

MAX_STAGES = 2  # the blocks of conformance.lm.TinyLlama

COMMON = (
    (
        {"model": models_without("keep_stage")},
        "the model declares no pipeline split (keep_stage): which layers form a stage is the model's choice",
    ),
)
ONE_FILE = (
    {"storage": tuple(sorted(n for n, s in STORAGES.items() if s.one_file_by_rank0))},
    "each pipeline stage holds its own layers' state: one file written by rank 0 holds the first "
    "stage's only (use torch_save_per_rank or dcp)",
)


@dataclass(frozen=True)
class Stages(Layout):
    """One stage per rank: rank r holds stage r."""

    def data_rank(self, case: Case, rank: int) -> int:
        return 0

    def ranks_per_stage(self, case: Case) -> int | None:
        return 1


@dataclass(frozen=True)
class StagesOverFsdp(Layout):
    """(stages, dp): rank = stage * dp + d; the d-th rank of every stage one pipeline."""

    def meshes(self, world_size: int) -> tuple[str, ...]:
        return (f"{MAX_STAGES}x{world_size // MAX_STAGES}",) if world_size % MAX_STAGES == 0 else ("",)

    def data_rank(self, case: Case, rank: int) -> int:
        return rank % case_mesh(case)[-1]

    def ranks_per_stage(self, case: Case) -> int | None:
        return case_mesh(case)[-1]


@dataclass(frozen=True)
class InterleavedStages(Stages):
    """Several stages per rank (interleaved 1F1B): rank r holds stages r, r + W, ... of the
    model's pipeline units; every rank trains on the same batches."""


INTERLEAVED_RANKS = (
    2  # the llama's 4 units (embeddings, 2 blocks, norm and head): 2 stages on each of 2 ranks
)

LAYOUTS = (
    Stages(
        "pp",
        "stages",
        build=lambda case: PipelineWrapper(),
        apis=STATE_APIS["pp"],
        refusals=(
            *COMMON,
            (
                {"world_size": tuple(range(MAX_STAGES + 1, 9))},
                f"one pipeline stage per rank, and the model has {MAX_STAGES} blocks: {MAX_STAGES} stages at most",
            ),
            ONE_FILE,
        ),
    ),
    StagesOverFsdp(
        "pp",
        "fsdp",
        build=lambda case: PipelineFsdpWrapper(case_mesh(case)),  # type: ignore[arg-type]
        apis=STATE_APIS["pp"],
        refusals=(
            *COMMON,
            (
                {"world_size": (1, 3, 5, 7)},
                f"{MAX_STAGES} pipeline stages, each sharded over the same number of ranks: an even world",
            ),
            ONE_FILE,
        ),
    ),
    InterleavedStages(
        "pp",
        "interleaved",
        build=lambda case: InterleavedWrapper(),
        apis=STATE_APIS["pp"],
        refusals=(
            (
                {"model": models_without("pipeline_units")},
                "the model declares no pipeline units (pipeline_units): which modules form a stage is the "
                "model's choice",
            ),
            (
                {"world_size": tuple(n for n in range(1, 9) if n != INTERLEAVED_RANKS)},
                "the llama's 4 pipeline units (embeddings, 2 blocks, norm and head) are 2 stages on each of "
                f"{INTERLEAVED_RANKS} ranks",
            ),
            ONE_FILE,
        ),
    ),
)
