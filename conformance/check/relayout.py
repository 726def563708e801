"""The relayout check: a checkpoint saved in one parallel layout is loaded in another (a 2-D
(dp, tp) mesh into FSDP alone, into TP alone, into a smaller mesh, into one rank; TP degree 2
into 4 and back; 2 pipeline stages into 1 and back, with FSDP inside the stages into without
and back; FSDP alone into a 2-D mesh). The canonical
state compared is each whole tensor by its original name, bitwise, as for resharding
(conformance.check.transfer runs it: save in one world, load in a separate one).

Both sides use the same state-dict API and storage: get/set_state_dict sharded through DCP,
the resharding format, and full through one torch.save file (pipeline stages: sharded, with the
optimizer state flattened by parameter name, as torchtitan saves its stages).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from conformance.case import Case, Transfer
from conformance.check import transfer
from conformance.check.base import Check, Feature, mine
from conformance.check.fused_cells import FUSED_MODEL
from conformance.strategy.registry import STRATEGY_KINDS, RegisteredStrategy

# A layout: (wrapper, sharding, mesh, world size).
Layout = tuple[str, str, str, int]
EP_MODEL = "moe_dtensor"  # experts as DTensors: the model of the ep layouts' pairs
TWO_D: Layout = ("fsdp2", "tp", "2x2", 4)

# (saved in, loaded in) of every profile's cells with the sharded and the full format.
TP_PAIRS: tuple[tuple[Layout, Layout], ...] = (
    (TWO_D, ("fsdp2", "shard", "", 4)),  # 2-D into FSDP alone
    (TWO_D, ("tp", "tp", "", 4)),  # into TP alone
    (TWO_D, ("fsdp2", "tp", "1x2", 2)),  # into a smaller mesh
    (TWO_D, ("fsdp2", "tp", "1x4", 4)),  # the same ranks, another mesh
    (TWO_D, ("fsdp2", "shard", "", 1)),  # into one rank, for evaluation
    (("fsdp2", "shard", "", 4), TWO_D),  # FSDP alone into 2-D
    (("tp", "tp", "", 2), ("tp", "tp", "", 4)),  # TP degree 2 into 4
    (("tp", "tp", "", 4), ("tp", "tp", "", 2)),  # and 4 into 2
)
STAGE_PAIRS: tuple[tuple[Layout, Layout], ...] = (
    (("pp", "stages", "", 2), ("pp", "stages", "", 1)),  # 2 stages into 1
    (("pp", "stages", "", 1), ("pp", "stages", "", 2)),  # 1 stage into 2
    (("pp", "fsdp", "2x2", 4), ("pp", "stages", "", 2)),  # FSDP inside the stages into stages alone
    (("pp", "stages", "", 2), ("pp", "fsdp", "2x2", 4)),  # and back
)
EP_PAIRS: tuple[tuple[Layout, Layout], ...] = (
    (("fsdp2", "ep", "1x2", 2), ("fsdp2", "ep", "1x4", 4)),  # DTensor experts on 2 into 4 ranks
    (("fsdp2", "ep", "1x4", 4), ("fsdp2", "ep", "1x2", 2)),  # and 4 into 2
    (("fsdp2", "ep", "1x2", 2), ("fsdp2", "shard", "", 2)),  # into FSDP alone
)
FORMATS: tuple[tuple[str, str], ...] = (("dsd_sharded", "dcp"), ("dsd_full", "torch_save"))
STAGE_FORMATS: tuple[tuple[str, str], ...] = (("dsd_sharded_flat", "dcp"), ("dsd_sharded", "dcp"))
# The model with fused projections (conformance.fused_lm): 2-D into FSDP alone, TP degree 2 into
# 4, FSDP alone into a 2-D mesh of 2 ranks.
FUSED_PAIRS: tuple[tuple[Layout, Layout], ...] = (
    (TWO_D, ("fsdp2", "shard", "", 4)),
    (("tp", "tp", "", 2), ("tp", "tp", "", 4)),
    (("fsdp2", "shard", "", 2), ("fsdp2", "tp", "1x2", 2)),
)
CI_PAIRS: tuple[tuple[Layout, Layout], ...] = (
    (("fsdp2", "tp", "1x2", 2), ("fsdp2", "shard", "", 2)),
    (("fsdp2", "shard", "", 2), ("fsdp2", "tp", "1x2", 2)),
    (("pp", "stages", "", 2), ("pp", "stages", "", 1)),
)


def _case(layout: Layout, api: str, storage: str, model: str = "llama") -> Case:
    wrapper, sharding, mesh, world_size = layout
    return Case(wrapper, sharding, api, storage, "adamw", model, world_size, check="relayout", mesh=mesh)


def _model(save: Layout) -> str:
    """The model of a pair: the experts' for an expert-parallel source, else the llama."""
    return EP_MODEL if save[1] == "ep" else "llama"


def _stage_pair(pair: tuple[Layout, Layout]) -> bool:
    return pair[0][0] == "pp" or pair[1][0] == "pp"


def pairs_cells(
    pairs: tuple[tuple[Layout, Layout], ...], formats: tuple[tuple[str, str], ...], model: str = ""
) -> set[Transfer]:
    """The cells of the pairs in each format, on `model` ("": the pair's own, _model)."""
    return {
        Transfer(
            "relayout",
            _case(save, api, storage, model or _model(save)),
            _case(load, api, storage, model or _model(save)),
        )
        for save, load in pairs
        for api, storage in (STAGE_FORMATS if _stage_pair((save, load)) else formats)
    }


@dataclass(frozen=True)
class LayoutCells:
    """Saved in one layout, loaded in another: profile -> (saved in, loaded in) pairs. A
    registered strategy gets every pair in each kind it may save, in its name and storage; it
    takes those whose two layouts (and model, world sizes) it declares."""

    pairs: Mapping[str, tuple[tuple[Layout, Layout], ...]]
    # profile -> pairs on the model with fused projections (a registered strategy's where it declares it)
    fused_pairs: Mapping[str, tuple[tuple[Layout, Layout], ...]] = field(default_factory=dict)

    def cells(self, check: str, profile: str) -> list[Transfer]:
        formats = FORMATS if profile != "ci" else FORMATS[:1]
        cells = pairs_cells(self.pairs.get(profile, ()), formats)
        cells |= pairs_cells(self.fused_pairs.get(profile, ()), formats, FUSED_MODEL)
        return sorted(cells, key=lambda c: c.id)

    def strategy_cells(self, check: str, profile: str, strategy: RegisteredStrategy) -> list[Transfer]:
        api, storage = FORMATS[0]  # the built-in side's, replaced by the strategy's own (mine)
        models = strategy.supports.models or ()
        pairs = [(save, load, _model(save)) for save, load in self.pairs.get(profile, ())]
        if FUSED_MODEL in models:
            pairs += [(save, load, FUSED_MODEL) for save, load in self.fused_pairs.get(profile, ())]
        out = set()
        for save, load, model in pairs:
            base = (_case(save, api, storage, model), _case(load, api, storage, model))
            for kind in STRATEGY_KINDS:
                out.add(Transfer(check, mine(strategy, base[0], kind), mine(strategy, base[1], kind)))
        return sorted(out, key=lambda c: c.id)


CHECK = Check(
    name="relayout",
    title="Relayout: saved in one parallel layout (mesh, TP degree, stages), loaded in another",
    shape=LayoutCells(
        {
            "ci": CI_PAIRS,
            "default": TP_PAIRS + STAGE_PAIRS + EP_PAIRS,
            "full": TP_PAIRS + STAGE_PAIRS + EP_PAIRS,
        },
        fused_pairs={"default": FUSED_PAIRS, "full": FUSED_PAIRS},
    ),
    execute=transfer.execute,
    features=(Feature("relayout", "loads in another parallel layout"),),
    registered=True,
)
