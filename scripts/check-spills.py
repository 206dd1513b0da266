#!/usr/bin/env python3
"""check-spills.py — fail if a GEMM inner loop of any ISA touches the stack.

    scripts/check-spills.py [--objdump PATH] [--verbose] OBJ...

OBJ: the object file of src/cpu/attn_math.cpp in an optimized build, e.g.
build/CMakeFiles/fattn.dir/src/cpu/attn_math.cpp.o; given several (ctest passes all of the
library's objects), the one named attn_math.cpp.o (or .obj) is used. The script disassembles it with objdump,
takes every per-ISA GEMM entry (isa_<name>::gemm_nn / gemm_tn / gemm_nn_max), finds its innermost loops (a
backward jump whose range holds no other backward jump) that do the multiply-adds (vfmadd on
avx2/avx512, mulps on base), and fails if one of them loads or stores through %rsp (or %rbp as the frame pointer) — the
accumulators of a register block that does not fit the ISA's registers end up there (GCC 12
kept a 64-byte vector type on the stack under AVX2: 133 instructions for 12 FMAs). It also
fails if an ISA's GEMM has no such loop at all, or if an FMA loop of an ISA uses vector
registers wider than the ISA has (zmm under avx2), so a refactor cannot make the check vacuous.
"""
import re
import subprocess
import sys

ISAS = {  # name: (multiply-add mnemonic prefix, register class the loop must use, wider classes)
    "base": (("mulps",), "%xmm", ("%ymm", "%zmm")),
    "avx2": (("vfmadd",), "%ymm", ("%zmm",)),
    "avx512": (("vfmadd",), "%zmm", ()),
}
FUNC_RE = re.compile(r"^([0-9a-f]+) <(.*)>:$")
INSN_RE = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$")
STACK_RSP = re.compile(r"\(%rsp[,)]")
STACK_RBP = re.compile(r"\((%rsp|%rbp)[,)]")  # only where %rbp is the frame pointer


def disassemble(obj, objdump):
    out = subprocess.run([objdump, "-d", "-C", "--no-show-raw-insn", obj],
                         check=True, capture_output=True, text=True).stdout
    funcs, cur = {}, None
    for line in out.splitlines():
        m = FUNC_RE.match(line)
        if m:
            cur = funcs.setdefault(m.group(2), [])
            continue
        m = INSN_RE.match(line)
        if m and cur is not None:
            cur.append((int(m.group(1), 16), m.group(2), m.group(3)))
    return funcs


def innermost_loops(insns):
    """(start, end) index ranges of backward jumps that contain no other backward jump."""
    addr_idx = {a: i for i, (a, _, _) in enumerate(insns)}
    loops = []
    for i, (a, mn, ops) in enumerate(insns):
        if not mn.startswith("j"):
            continue
        m = re.match(r"([0-9a-f]+)\b", ops)
        if not m:
            continue
        tgt = int(m.group(1), 16)
        if tgt <= a and tgt in addr_idx:
            loops.append((addr_idx[tgt], i))
    return [(s, e) for (s, e) in loops
            if not any((s2, e2) != (s, e) and s <= s2 and e2 <= e for (s2, e2) in loops)]


def main():
    args, objdump, verbose = sys.argv[1:], "objdump", False
    if "--verbose" in args:
        args.remove("--verbose")
        verbose = True
    if "--objdump" in args:
        i = args.index("--objdump")
        objdump = args[i + 1]
        del args[i:i + 2]
    args = [a for arg in args for a in arg.split(";") if a]  # ctest hands a CMake list as one
    objs = [a for a in args if a.endswith(("attn_math.cpp.o", "attn_math.cpp.obj"))] or args
    if len(objs) != 1:
        print(__doc__)
        return 2
    funcs = disassemble(objs[0], objdump)
    failures, checked = [], 0
    for isa, (fma, reg, wider) in ISAS.items():
        for kind in ("gemm_nn", "gemm_tn", "gemm_nn_max"):
            names = [n for n in funcs if f"isa_{isa}::{kind}(" in n]
            if not names:
                failures.append(f"{isa} {kind}: function not found in the object")
                continue
            insns = funcs[names[0]]
            # -fomit-frame-pointer (Release) frees %rbp as a general register; it addresses the
            # stack only in a function that sets it up as the frame pointer.
            has_frame = any(mn == "mov" and ops.replace(" ", "") == "%rsp,%rbp" for _, mn, ops in insns)
            stack_re = STACK_RBP if has_frame else STACK_RSP
            fma_loops = 0
            for s, e in innermost_loops(insns):
                body = insns[s:e + 1]
                nfma = sum(1 for _, mn, _ in body if mn.startswith(fma))
                if nfma == 0:
                    continue
                fma_loops += 1
                stack = [f"{a:x}: {mn} {ops}" for a, mn, ops in body if stack_re.search(ops)]
                wide = [f"{a:x}: {mn} {ops}" for a, mn, ops in body
                        if mn.startswith(fma) and any(w in ops for w in wider)]
                narrow = all(reg in ops for _, mn, ops in body if mn.startswith(fma))
                tag = f"{isa} {kind} loop @{body[0][0]:x}: {len(body)} insns, {nfma} mul-adds"
                if verbose or stack or wide or not narrow:
                    print(tag + (f", {len(stack)} stack accesses" if stack else ", no stack access"))
                if stack:
                    failures.append(tag + " touches the stack:\n    " + "\n    ".join(stack[:8]))
                if wide or not narrow:
                    failures.append(tag + f" does not use {reg} registers only")
            checked += 1
            if fma_loops == 0:
                failures.append(f"{isa} {kind}: no innermost multiply-add loop found")
            elif verbose:
                print(f"{isa} {kind}: {fma_loops} inner loops checked")
    for f in failures:
        print("FAIL " + f)
    print(f"check-spills: {checked} GEMM entries, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
