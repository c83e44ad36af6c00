"""The base of every model read from a matrix file or a file beside it: an unknown key is an
error (with the closest name, ``harness.matrix.load``), values are frozen, and NaN and infinities
are refused everywhere: a `.nan` baseline or an `.inf` threshold or deadline would silently drop
the gate or the bound it states."""

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
