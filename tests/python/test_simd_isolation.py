#!/usr/bin/python3
"""simd_isolation: the wider-ISA variants of the vector kernels share no
code with the rest of the program.

    test_simd_isolation.py ARCHIVE...

Each archive holds one variant compiled with AVX2 or AVX-512 flags. An
inline function (a std:: or xtensor template, say) emitted there would be a
weak symbol the linker may pick for baseline callers too: the baseline
build would then execute AVX2 code on a CPU without it. So every symbol such
an object defines must be its own: in namespace attn::simd_kernels (the
kernels, internal, and the one table it exports); an xsimd template
instantiated for this variant's own architecture type (an unoptimised or
sanitizer build emits those out of line; baseline code instantiates xsimd
for its own, other architecture, so it never names them); AddressSanitizer's
ODR indicators; or the personality-routine reference every C++ object
carries.
"""
import glob
import os
import re
import subprocess

from checklib import Checks
from paths import build

ALLOWED_PREFIXES = ("attn::simd_kernels::", "__odr_asan.")
ALLOWED = {"DW.ref.__gxx_personality_v0"}
# The xsimd architecture type each variant is compiled for (lib/meson.build's flags).
VARIANT_ARCH = {"avx2": "xsimd::fma3<xsimd::avx2>", "avx512": "xsimd::avx512bw", "avx512bf16": "xsimd::avx512bw",
                "avx512amx": "xsimd::avx512bw"}


def test_variant_objects_define_only_their_own_kernels():
    archives = sorted(glob.glob(build("lib", "libattn_simd_*.a")))
    assert archives, "no vector-kernel variant archive in build/lib (not an x86-64 build?)"
    checks = Checks()
    for archive in archives:
        variant = re.search(r"attn_simd_([a-z0-9]+)\.a$", os.path.basename(archive))
        own_arch = VARIANT_ARCH.get(variant[1]) if variant else None
        checks.record(own_arch is not None, f"{archive}: not a known variant archive (libattn_simd_<id>.a)")
        out = subprocess.run(["nm", "-C", "--defined-only", archive], capture_output=True, text=True, check=True).stdout
        symbols = []
        for line in out.splitlines():
            parts = line.split(maxsplit=2)
            if len(parts) == 3 and parts[1] not in ("t", "d", "b", "r", "n"):  # external (global or weak) definitions
                symbols.append((parts[1], parts[2]))
        print(f"{archive}: {len(symbols)} external definitions: " + ", ".join(s for _, s in symbols))
        checks.record(any(s.startswith("attn::simd_kernels::kernels_") for _, s in symbols),
                      f"{archive}: no kernel table defined (did the variant compile at all?)")
        for kind, s in symbols:
            own = s.startswith(ALLOWED_PREFIXES) or s in ALLOWED or (s.startswith("xsimd::") and own_arch and own_arch in s)
            checks.record(own,
                          f"{archive}: {kind} {s} is defined with wider instructions and may be linked into baseline code")
    checks.finish()
