"""The machine code of the CUDA kernel: the order in which it issues its loads.

The PTX is not the last word: ptxas schedules the instructions again, and may sink a load
next to its first use. For the kernel to keep memory busy, every vector variant must issue
its loads of x and of the position before the first instruction that depends on any of
them; otherwise a call with a positions tensor makes two trips to memory one after the
other (the position, then x with the table rows) instead of one for x and the position
together. Checked on the sm_90 SASS that NVRTC (as CuPy uses it) makes, disassembled
by ``nvdisasm``, for every NVRTC found: the one of the ``nvidia-cuda-nvrtc`` wheel and
those listed in ``ANYROPE_NVRTC`` (paths of other ``libnvrtc.so``, separated by
``os.pathsep``; the tests-kernel nox session adds the NVRTC of torch's CUDA, 13.0).

Skips without NVRTC, nvdisasm (``pip install nvidia-cuda-nvdisasm``) or nvcc (for the
CUDA headers), except where ``ANYROPE_NVRTC`` is set (the tests-kernel nox session, which
installs them all), where a missing tool fails.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from anyrope._paths.cuda import _module
from test_cuda_source import (
    EDITED_CONFIGS,
    _cuda_include_dir,
    _nvcc,
    _nvrtc_compile,
    bench_gpu_launch,
)

ARCH = "sm_90"


def _missing(what: str) -> None:
    if os.environ.get("ANYROPE_NVRTC"):
        pytest.fail(f"{what} is required where ANYROPE_NVRTC is set (the tests-kernel session)")
    pytest.skip(f"{what} is not installed, so the kernel's SASS cannot be checked here")


def _wheel_files(pattern: str) -> list[Path]:
    """Files of the NVIDIA wheels (the ``nvidia`` namespace package) matching ``pattern``."""
    spec = importlib.util.find_spec("nvidia")
    folders = [] if spec is None else list(spec.submodule_search_locations or [])
    return sorted(p for folder in folders for p in Path(folder).glob(pattern))


def _nvrtc_paths() -> list[str]:
    extra = [p for p in os.environ.get("ANYROPE_NVRTC", "").split(os.pathsep) if p]
    return [*(str(p) for p in _wheel_files("*/lib/libnvrtc.so.*")), *extra]


def _nvdisasm() -> str:
    found = shutil.which("nvdisasm") or next(map(str, _wheel_files("*/bin/nvdisasm")), None)
    if found is None:
        _missing("nvdisasm (pip install nvidia-cuda-nvdisasm)")
    assert found is not None
    return found


@functools.cache
def _sass(nvrtc_path: str, source: str | None = None) -> tuple[str, dict[str, str]]:
    """The SASS of every variant of every dtype, by the NVRTC at ``nvrtc_path``, and the
    lowered name of each variant (of the shipped kernel, or of ``source``)."""
    # libnvrtc opens its builtins by name: load the ones beside it first.
    for builtins in sorted(Path(nvrtc_path).parent.glob("libnvrtc-builtins.so*")):
        ctypes.CDLL(str(builtins))
    # CuPy's options: the kernel's own, the CUDA headers, a real architecture (CuPy asks
    # NVRTC for a cubin when it can) and the -ftz=true CuPy appends.
    options = [
        *_module.COMPILE_OPTIONS,
        f"-I{_cuda_include_dir(_nvcc())}",
        f"--gpu-architecture={ARCH}",
        "-ftz=true",
    ]
    cubin, lowered = _nvrtc_compile(
        options, lib=ctypes.CDLL(nvrtc_path), output="CUBIN", source=source
    )
    return _disassemble(cubin), {name: value.decode() for name, value in lowered.items()}


def _disassemble(cubin: bytes) -> str:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rope.cubin"
        path.write_bytes(cubin)
        done = subprocess.run(
            [_nvdisasm(), "-c", str(path)], capture_output=True, text=True, check=True
        )
    return done.stdout


def _nvrtc_version(nvrtc_path: str) -> str:
    for builtins in sorted(Path(nvrtc_path).parent.glob("libnvrtc-builtins.so*")):
        ctypes.CDLL(str(builtins))
    lib = ctypes.CDLL(nvrtc_path)
    major, minor = ctypes.c_int(), ctypes.c_int()
    assert lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)) == 0
    return f"{major.value}.{minor.value}"


def _function(sass: str, lowered_name: str) -> str:
    """The SASS of one kernel: from its ``.text`` label to the next section."""
    start = sass.index(f".text.{lowered_name}:")
    end = sass.find("\n\t.section", start)
    return sass[start : end if end >= 0 else len(sass)]


# -- a reading of SASS just deep enough for the order of loads ---------------------------

_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
_REGISTER = re.compile(r"\bR(\d+)\b")
_NO_REGISTER_WRITTEN = ("ST", "BRA", "EXIT", "BSYNC", "BSSY", "RET", "CALL", "ISETP", "FSETP")


@dataclass(frozen=True)
class Instruction:
    address: int
    opcode: str
    operands: tuple[str, ...]
    reads: frozenset[int]
    writes: frozenset[int]
    predicated: bool

    @property
    def load(self) -> bool:
        return self.opcode.startswith("LDG")

    @property
    def ends_block(self) -> bool:
        """An unconditional branch or exit: what follows is reached another way (a
        predicated branch may fall through)."""
        return self.opcode in {"BRA", "EXIT"} and not self.predicated

    @property
    def barrier(self) -> bool:
        """A barrier every thread of the block waits at (not the conditional one, which
        guards the reuse of the shared rows in a block's later iterations)."""
        return self.opcode.startswith("BAR.SYNC") and not self.predicated


def _registers(operand: str, count: int) -> set[int]:
    return {int(m.group(1)) + i for m in _REGISTER.finditer(operand) for i in range(count)}


def _written_count(opcode: str) -> int:
    if opcode.startswith("LDG"):
        return 4 if ".128" in opcode else 2 if ".64" in opcode else 1
    return 2 if ".64" in opcode or opcode.startswith("IMAD.WIDE") else 1


def parse(sass: str) -> list[Instruction]:
    """The instructions of ``sass``: the registers each reads and writes (a 64-bit
    address ``[R4.64]`` reads R4 and R5; a 128-bit load writes four registers)."""
    program = []
    for match in _INSTRUCTION.finditer(sass):
        opcode = match.group(3)
        operands = tuple(o.strip() for o in match.group(4).split(",") if o.strip())
        if opcode.startswith(_NO_REGISTER_WRITTEN) or not operands:
            sources, writes = operands, set()
        else:
            sources, writes = operands[1:], _registers(operands[0], _written_count(opcode))
        reads = {r for o in sources for r in _registers(o, 2 if ".64" in o else 1)}
        program.append(
            Instruction(
                int(match.group(1), 16),
                opcode,
                operands,
                frozenset(reads),
                frozenset(writes),
                match.group(2) is not None,
            )
        )
    return program


def first_use(program: list[Instruction], at: int) -> int | None:
    """Index of the first instruction after ``at`` that reads what ``at`` loaded, along
    the straight-line code that follows it."""
    live = set(program[at].writes)
    for i in range(at + 1, len(program)):
        if program[i].reads & live:
            return i
        live -= program[i].writes
        if not live or program[i].ends_block:
            return None
    return None


def addressed_loads(program: list[Instruction], at: int) -> list[int]:
    """The loads whose address what ``at`` loads goes into, through arithmetic, along the
    straight-line code that follows (the position's: the table rows it selects)."""
    taint, found = set(program[at].writes), []
    for i in range(at + 1, len(program)):
        instruction = program[i]
        if instruction.ends_block:
            break
        if instruction.reads & taint:
            if instruction.load:
                found.append(i)
            else:
                taint |= instruction.writes
        else:
            taint -= instruction.writes
    return found


@dataclass(frozen=True)
class Loads:
    """The loads of a rotated unit in one kernel, by what they load, the loads that
    some instruction that depends on them precedes (empty when the order is right) and
    the loads of x issued after the barrier at which the block's table rows are staged
    in shared memory (empty when the order is right)."""

    position: list[int]
    x: list[int]
    late: list[int]
    after_barrier: list[int]


def _same_address(program: list[Instruction], i: int, j: int) -> bool:
    """Whether loads ``i`` and ``j`` read the same address: the same operand, its
    registers not written in between."""
    operand = program[i].operands[-1]
    if program[j].operands[-1] != operand:
        return False
    registers = _registers(operand, 2 if ".64" in operand else 1)
    return not any(program[n].writes & registers for n in range(min(i, j), max(i, j)))


def _staging_barrier(program: list[Instruction], p: int) -> int:
    """Index of the barrier at which the table rows that the position load ``p`` selects
    are staged, along the code that follows ``p`` up to an unconditional branch;
    ``len(program)`` for a unit that stages nothing."""
    stored = False
    for b in range(p + 1, len(program)):
        stored |= program[b].opcode.startswith("STS")
        if stored and program[b].opcode.startswith("BAR.SYNC"):
            return b
        if program[b].ends_block:
            break
    return len(program)


def unit_loads(program: list[Instruction]) -> Loads:
    """Position loads: those whose value makes an address, and their alternatives at the
    same address (32- or 64-bit, predicated). Table loads: those at the addresses the
    position makes (strong loads that feed the stores to shared memory, or the read-only
    ``.CONSTANT`` loads of interleaved pairs, which stage nothing). x loads: the
    others (a copied unit's too: the same loads)."""
    loads = [i for i, instruction in enumerate(program) if instruction.load]
    uses = {i: first_use(program, i) for i in loads}
    addressed = {i: addressed_loads(program, i) for i in loads}
    feeding = [i for i in loads if addressed[i]]
    position = [i for i in loads if any(_same_address(program, i, j) for j in feeding)]
    tables = {t for i in position for t in addressed[i]}
    x = [i for i in loads if i not in position and i not in tables]
    # ptxas may emit the unit's code more than once (the first pass of the stride loops
    # apart from the later ones, which wait for the rows to be read before restaging
    # them): each copy is a unit of its own, its position load followed by the barrier at
    # which its table rows are staged (the first after a store to shared memory, before
    # the code ends in an unconditional branch; none in an unstaged unit), and its x loads
    # those whose first use follows that barrier.
    late, after, placed = [], [], set()
    for p in position:
        staged = _staging_barrier(program, p)
        # x is first used after the position (a copied unit's stores of x, the rotation);
        # a unit's code ends at the next unit's position or at an unconditional branch.
        following = min(
            next((n for n in position if n > staged), len(program)),
            next((n for n in range(p, len(program)) if program[n].ends_block), len(program)),
        )
        unit = [i for i in x if (uses[i] or -1) > p and (uses[i] or -1) < following]
        placed.update(unit)
        issued = [*unit, p]
        first = min((u for u in (uses[i] for i in issued) if u is not None), default=None)
        late += [program[i].address for i in issued if first is not None and i > first]
        # Staged, the table rows in one round too: every table load before any use of one
        # (unstaged, NVRTC splits the 16-bit V8 interleaved variants' in two).
        rows = addressed[p] if staged < len(program) else []
        first = min((u for u in (uses[i] for i in rows) if u is not None), default=None)
        late += [program[i].address for i in rows if first is not None and i > first]
        after += [program[i].address for i in unit if i > staged]
    late += [program[i].address for i in x if i not in placed]
    return Loads(
        [program[i].address for i in position],
        [program[i].address for i in x],
        sorted(set(late)),
        sorted(set(after)),
    )


def _vector_variants() -> list[tuple[str, str]]:
    return [
        (dtype, name)
        for dtype in _module.KERNEL_TYPES
        for name in _module.kernel_names(dtype)
        if ", 1, " not in name
    ]


def _variant_id(dtype: str, name: str) -> str:
    width = name.split(", ")[1]
    layout = "interleaved" if ", true, " in name else "half-split"
    index = "int64" if "long long" in name else "int32"
    return f"{dtype}-V{width}-{layout}-{index}"


def _nvrtc_params() -> list[object]:
    """One parameter per NVRTC found, named by its version."""
    paths = _nvrtc_paths()
    if not paths:
        return [pytest.param(None, id="no-nvrtc")]
    return [pytest.param(path, id=f"nvrtc{_nvrtc_version(path)}") for path in paths]


VECTOR_VARIANTS = _vector_variants()


@pytest.mark.parametrize("nvrtc", _nvrtc_params())
@pytest.mark.parametrize(
    ("dtype", "name"), VECTOR_VARIANTS, ids=[_variant_id(*v) for v in VECTOR_VARIANTS]
)
def test_x_and_position_loads_are_issued_before_their_first_use(
    nvrtc: str | None, dtype: str, name: str
) -> None:
    if nvrtc is None:
        _missing("NVRTC (pip install nvidia-cuda-nvrtc)")
        return
    sass, lowered = _sass(nvrtc)
    loads = _loads_of(sass, lowered, name)
    assert loads.after_barrier == [], (
        f"{name} (NVRTC {_nvrtc_version(nvrtc)}, {ARCH}): the loads of x at "
        f"{[hex(a) for a in loads.after_barrier]} wait for the table rows to be staged"
    )
    assert loads.late == [], (
        f"{name} (NVRTC {_nvrtc_version(nvrtc)}, {ARCH}): the loads at "
        f"{[hex(a) for a in loads.late]} come after an instruction that uses a load of x or "
        f"of the position (positions {[hex(a) for a in loads.position]}, "
        f"x {[hex(a) for a in loads.x]})"
    )


def _loads_of(sass: str, lowered: dict[str, str], name: str) -> Loads:
    """The loads of variant ``name`` (which loads x and the position) in the SASS."""
    loads = unit_loads(parse(_function(sass, lowered[name])))
    assert loads.position, f"no position load found in {name}"
    assert len(loads.x) >= 1, f"no load of x found in {name}"
    return loads


@pytest.mark.parametrize("nvrtc", _nvrtc_params())
@pytest.mark.parametrize("config", EDITED_CONFIGS, ids=[c.name for c in EDITED_CONFIGS])
def test_the_kernels_that_bench_gpu_launch_edits_issue_their_loads_of(
    nvrtc: str | None, config: Any
) -> None:
    """bench_gpu_launch.py times kernels edited from the shipped one: each issues its
    loads as the shipped one does, so that a time measures what the edit changes."""
    if nvrtc is None:
        _missing("NVRTC (pip install nvidia-cuda-nvrtc)")
        return
    source = bench_gpu_launch.edited(_module.kernel_source(), config.edits)
    sass, lowered = _sass(nvrtc, source)
    out_of_order = []
    for _, name in VECTOR_VARIANTS:
        loads = _loads_of(sass, lowered, name)
        if loads.late or loads.after_barrier:
            out_of_order.append(name)
    assert out_of_order == [], f"{config.name} (NVRTC {_nvrtc_version(nvrtc)})"


@pytest.mark.parametrize("nvrtc", _nvrtc_params())
def test_half_split_rotations_stage_their_table_rows_and_interleaved_ones_do_not(
    nvrtc: str | None,
) -> None:
    """Half-split pairs stage their table rows in shared memory (a barrier, then the rows
    read there); interleaved pairs read their own rows through the read-only cache, with
    no barrier: staged, they ran at 0.75 of a copy against 0.93 (bfloat16, H200)."""
    if nvrtc is None:
        _missing("NVRTC (pip install nvidia-cuda-nvrtc)")
        return
    sass, lowered = _sass(nvrtc)
    found = {}
    for _, name in VECTOR_VARIANTS:
        program = parse(_function(sass, lowered[name]))
        found[name] = (
            any(i.opcode.startswith("BAR.SYNC") for i in program),
            any(i.opcode.startswith("LDS") for i in program),
            any(i.opcode.startswith("LDG") and ".CONSTANT" in i.opcode for i in program),
        )
    staged, unstaged = (True, True, False), (False, False, True)
    assert found == {name: unstaged if ", true, " in name else staged for name in found}
