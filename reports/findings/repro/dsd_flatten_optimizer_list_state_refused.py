"""get_optimizer_state_dict(flatten_optimizer_state_dict=True) refuses LBFGS's state.

Limitation: with StateDictOptions(flatten_optimizer_state_dict=True), torch.distributed.checkpoint's
get_optimizer_state_dict flattens every state value into its own key and accepts only tensors, ints,
floats and dicts (_raise_if_type_not_supported in torch/distributed/checkpoint/state_dict.py).
LBFGS keeps lists of tensors (old_dirs, old_stps, ro, al) in its state, so the call raises
"Flattening optimizer state_dict only supports tensor, int, float, dict states now. Type is
<class 'list'>". Libraries that always flatten (NeMo Automodel's optimizer state; torchtitan's
pipeline stages ask for it) cannot save an LBFGS optimizer.

Control: the same optimizer without flattening gives its state dict (printed as a control line).

Seen on: torch 2.13.0+cpu (gloo, CPU, 1 rank).
Upstream: the check came with pytorch/pytorch#127071 ("Support flattening the optimizer state_dict");
no issue about a list state found.

Run: python reports/findings/repro/dsd_flatten_optimizer_list_state_refused.py
Exit 1 + "BUG PRESENT:" if it reproduces, 0 + "FIXED:" if not, 2 on any setup failure.
"""

import sys
import traceback

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict


def main() -> int:
    try:
        torch.manual_seed(0)
        model = nn.Linear(4, 3)
        optim = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=2, history_size=3)
        x, y = torch.randn(5, 4), torch.randn(5, 3)

        def closure():
            optim.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss

        optim.step(closure)
        plain = get_optimizer_state_dict(model, optim)
        kinds = sorted({type(v).__name__ for s in plain["state"].values() for v in s.values()})
        print(f"control: without flattening the state dict holds {kinds}")
    except Exception:
        traceback.print_exc()
        return 2
    try:
        get_optimizer_state_dict(model, optim, options=StateDictOptions(flatten_optimizer_state_dict=True))
    except Exception as exc:  # the refusal
        print(f"BUG PRESENT: flatten_optimizer_state_dict=True raised {type(exc).__name__}: {exc}")
        return 1
    print("FIXED: the flattened state dict of LBFGS was taken")
    return 0


if __name__ == "__main__":
    sys.exit(main())
