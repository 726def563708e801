"""FSDP1 over tensor parallelism: the harness makes whole tensors of flat parameters whose
pieces are DTensor shards (conformance.check.flat_tp), for both FSDP1 modes, column- and
row-wise layers, a replicated bias and a layer the plan leaves whole."""

from __future__ import annotations

import pytest

from conformance.world import WorldPool
from tests import flat_tp_cells


@pytest.mark.parametrize("orig", [True, False], ids=["use_orig_params", "flat"])
def test_the_canonical_state_of_fsdp1_over_tp_is_the_plain_model(orig: bool) -> None:
    with WorldPool() as pool:
        run = pool.run("gloo", 4, flat_tp_cells.canonical_is_the_plain_model, orig, timeout_s=120)
    assert run.status == "ok", run.detail
    per_param = run.values[0]
    assert set(per_param) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"}
    assert all(per_param.values()), per_param
