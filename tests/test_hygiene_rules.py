"""The hygiene check's comparison must never pass by comparing nothing: an expected state (a
strategy's export_of) that names none of the plain model's parameters is a problem, not a pass."""

from __future__ import annotations

import torch
from torch import nn

from conformance.check.hygiene import hygiene_problems


def test_an_expected_state_naming_no_parameter_of_the_model_is_a_problem() -> None:
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    trained = {f"param/{name}": p.detach().clone() for name, p in model.named_parameters()}
    assert hygiene_problems(model.state_dict(), model, trained) == []
    # the names of another model (an export_of that kept PEFT's base_model.model. prefix)
    elsewhere = {f"param/base_model.model.{key[len('param/') :]}": v for key, v in trained.items()}
    problems = hygiene_problems(model.state_dict(), model, elsewhere)
    assert len(problems) == 1 and problems[0].startswith("no trained value to compare"), problems
