"""Parameter names as the checks show them: without the segments wrappers insert."""

from __future__ import annotations

WRAPPER_SEGMENTS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


def clean_name(fqn: str) -> str:
    """A parameter name without wrapper segments, for readable keys (e.g. fc1._flat_param)."""
    for segment in WRAPPER_SEGMENTS:
        fqn = fqn.replace(segment, "")
    return fqn.removeprefix("module.")
