"""Pydantic validation errors rendered as one message a user can act on, as the
scenario loader imports them; they live in :mod:`sflsim.inputs.messages`, which
profiles share."""

from sflsim.inputs.messages import (
    closest_name,
    describe_error,
    format_validation_error,
    quantity_leaves,
    union_member,
    walk,
)

__all__ = ["closest_name", "describe_error", "format_validation_error", "quantity_leaves",
           "union_member", "walk"]
