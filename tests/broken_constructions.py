"""A construction that skips the model's own initialisation: the fresh model is built on the meta
device and given storage (to_empty) as the meta construction does, but reset_parameters is never
called, as a path that materialises a model and trusts the load for everything leaves it. The
non-persistent buffer the state dict does not hold (mlp_nonpersistent's, as a rotary cache's
inv_freq) stays uninitialised memory, and the round trip and the resume must say so (a FAIL
naming the buffer, judged `corrupts`). Registered by `-p tests.broken_constructions`; the ranks
import this module too (plugin_modules). FSDP1 materialises a meta model itself, so its rows are
not this value's: DDP and FSDP2 get their storage from the construction."""

from __future__ import annotations

from conformance.construction.base import Construction
from conformance.construction.registry import register

UNINITIALISED = register(
    Construction(
        "meta_uninit",
        "on the meta device, then to_empty() and the load, no reset_parameters (broken on purpose)",
        on_meta=True,
        initialise=False,
    )
)

# A rank-0 init that skips the other ranks' own initialisation: rank 0 builds by its constructor,
# the others on the meta device and to_empty(), and nothing computes their non-persistent buffer;
# the full state broadcast from rank 0 does not hold it. FSDP2 never broadcasts a buffer, so its
# rank 1 keeps uninitialised memory (DDP's wrap broadcasts rank 0's buffers, and rescues it).
RANK0_UNINITIALISED = register(
    Construction(
        "rank0init_uninit",
        "rank-0 init whose other ranks get to_empty() and the load, no reset_parameters (broken on purpose)",
        on_meta=True,
        initialise=False,
        rank0_builds=True,
    )
)
