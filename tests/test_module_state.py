"""sflsim.models.module_state: a module's state-dict entries read without walking its tree."""

from __future__ import annotations

import torch
from torch import nn

from sflsim.models.module_state import state_entries, state_tensors


def _model() -> nn.Module:
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(2, 3))
    model[1].register_buffer("scratch", torch.ones(1), persistent=False)  # not in state_dict
    return model


def test_the_entries_are_state_dicts_in_its_order():
    model = _model()
    entries = state_entries(model)
    expected = model.state_dict()
    assert list(entries) == list(expected)
    assert "1.num_batches_tracked" in entries and "1.scratch" not in entries
    for name, t in entries.items():
        assert t.data_ptr() == expected[name].data_ptr()
    assert [t.data_ptr() for t in state_tensors(model)] == [t.data_ptr() for t in expected.values()]


def test_a_parameter_replaced_or_given_new_data_is_read_as_it_is_now():
    model = _model()
    state_tensors(model)  # the places are found on the first call
    model[3].weight = nn.Parameter(torch.full((3, 2), 7.0))
    model[0].bias.data = torch.full((2,), 5.0)
    model[1].running_mean = torch.full((2,), 3.0)
    entries = state_entries(model)
    assert torch.equal(entries["3.weight"], torch.full((3, 2), 7.0))
    assert torch.equal(entries["0.bias"], torch.full((2,), 5.0))
    assert torch.equal(entries["1.running_mean"], torch.full((2,), 3.0))
    assert all(torch.equal(a, b) for a, b in zip(state_tensors(model), model.state_dict().values()))
