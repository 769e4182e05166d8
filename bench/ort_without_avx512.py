#!/usr/bin/env python3
"""A copy of the installed ONNX Runtime that does not use its AVX-512 kernels.

Issue 19 asks for quantkit against ONNX Runtime on an AVX2 machine (no AVX-512, no VNNI).
ONNX Runtime has no switch to drop its AVX-512 kernels, and a VM without CPUID faulting
cannot hide the feature bits from it. This script copies the installed `onnxruntime`
package into DIR and changes one conditional jump in MLAS's platform set-up (the
`MLAS_PLATFORM` constructor): the branch taken when CPUID leaf 7 reports AVX512F and XCR0
enables the ZMM state becomes unconditional, so MLAS keeps the AVX2 / FMA3 kernels it chose
just before (u8s8 GEMM with `vpmaddubsw`, sgemm with FMA3, and the AVX-VNNI kernels only if
the CPU has AVX-VNNI). That is the code ONNX Runtime runs on an AVX2-only CPU; the
microarchitecture is still this machine's.

The jump is found by its instruction pattern, not by an address:

    test $0x10000, %rXXd      ; CPUID.7:EBX bit 16, AVX512F
    je   +N                   ; -> skip the AVX-512 block   (patched to jmp)
    ... (<= 12 bytes)
    test $0xe0, %al           ; XCR0 opmask/ZMM state enabled

The script refuses to write anything unless the pattern occurs exactly once.

Usage:
    python3 bench/ort_without_avx512.py DIR
    PYTHONPATH=DIR python3 bench/int8_vs_ort.py ...   # with QUANTKIT_ISA=avx2 for quantkit
"""
import os, re, shutil, sys

import onnxruntime

PATTERN = re.compile(rb"(\xf7[\xc0-\xc7]\x00\x00\x01\x00)\x74(.)(.{0,12}?)\xa8\xe0", re.S)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = os.path.abspath(sys.argv[1])
    src = os.path.dirname(onnxruntime.__file__)
    dst = os.path.join(out, "onnxruntime")
    capi = os.path.join(src, "capi")
    libs = [f for f in os.listdir(capi) if f.startswith("onnxruntime_pybind11_state") and f.endswith(".so")]
    if len(libs) != 1:
        sys.exit(f"expected one onnxruntime_pybind11_state*.so in {capi}, found {libs}")
    data = open(os.path.join(capi, libs[0]), "rb").read()
    hits = list(PATTERN.finditer(data))
    if len(hits) != 1:
        sys.exit(f"{libs[0]}: the AVX512F test of MLAS's platform set-up occurs {len(hits)} times "
                 "(expected 1); this ONNX Runtime build is not one this script knows")
    at = hits[0].start(0) + len(hits[0].group(1))
    os.makedirs(out, exist_ok=True)
    tmp = dst + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    patched = bytearray(data)
    assert patched[at] == 0x74
    patched[at] = 0xEB  # je rel8 -> jmp rel8
    with open(os.path.join(tmp, "capi", libs[0]), "wb") as f:
        f.write(patched)
    shutil.rmtree(dst, ignore_errors=True)
    os.rename(tmp, dst)
    print(f"onnxruntime {onnxruntime.__version__} without AVX-512 kernels: {dst} "
          f"(byte {at:#x} of {libs[0]}: je -> jmp)")
    print(f"use it with: PYTHONPATH={out}")


if __name__ == "__main__":
    main()
