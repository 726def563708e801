"""Storages: each one file of this package, registered here and nowhere else.

To add one: write a class with the attributes and methods of storage.base.Storage in a new
file (how it saves, loads and reads; which damage applies and where its payload, a rank's
files and its metadata are; which reshards it refuses by design), and add an instance below.
The matrix, the corrupt check and the properties read what they need from it.
"""

from __future__ import annotations

from conformance.strategy.storage.base import Storage
from conformance.strategy.storage.dcp import DcpDirectory
from conformance.strategy.storage.dcp_async import DCP_ASYNC, DCP_ASYNC_BUSY
from conformance.strategy.storage.dcp_to_torch_save import DcpToTorchSave
from conformance.strategy.storage.hf_safetensors import HfSafetensors
from conformance.strategy.storage.per_rank import PerRankFiles
from conformance.strategy.storage.rank_zero import RankZeroFile
from conformance.strategy.storage.torch_save_to_dcp import TorchSaveToDcp

STORAGES: dict[str, Storage] = {
    s.name: s
    for s in (
        DcpDirectory(),
        DCP_ASYNC,
        DCP_ASYNC_BUSY,
        DcpToTorchSave(),
        HfSafetensors(),
        RankZeroFile(),
        PerRankFiles(),
        TorchSaveToDcp(),
    )
}

__all__ = ["STORAGES", "DcpDirectory", "PerRankFiles", "RankZeroFile", "Storage"]
