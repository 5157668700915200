"""A torch module holding a RoPE, importable by name so that ``torch.save`` can pickle it."""

from __future__ import annotations

from typing import Any

import torch

import anyrope


class Attention(torch.nn.Module):
    """The smallest module that keeps a RoPE as an attribute, as attention layers do."""

    def __init__(self) -> None:
        super().__init__()
        self.rope = anyrope.RoPE(8)

    def forward(self, q: Any) -> Any:
        return self.rope.rotate(q, 3)
