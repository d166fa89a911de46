#!/usr/bin/env python3
"""Assembles the sqlite-sentiment wheel from a built sentiment.so.

    python3 python/build_wheel.py --so build/sentiment.so --version 0.1.0 \
        --out build/wheel [--cuda build/sentiment_cuda.so] [--patchelf PATH]

The wheel holds sqlite_sentiment/ (the Python modules: load(), the
sqlite-sentiment command, the sqlite-utils and Datasette plugins, whose
entry points are in entry_points.txt; sentiment.so and, when given, the
CUDA plugin) and sqlite_sentiment/libs/ (every shared library sentiment.so
needs that is not part of the manylinux base: what ldd resolves for it,
OpenBLAS, which blas.c dlopens by soname at run time, and their own
dependencies, each copied under its soname; sentiment.so without its debug
sections). patchelf sets the RUNPATH of sentiment.so to $ORIGIN/libs and that of each copied library to $ORIGIN, so
both the loader and blas.c's dlopen find the copies first. The platform tag
is manylinux_2_N_x86_64 where 2.N is the newest GLIBC symbol version any
ELF file in the wheel needs. See python/README.md for why.
"""

import argparse
import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))

# The manylinux base: libraries every manylinux system provides (PEP 600 /
# auditwheel's policy list), never copied into the wheel.
BASE_LIBS = {
    "linux-vdso.so.1", "ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6",
    "libdl.so.2", "libpthread.so.0", "librt.so.1", "libutil.so.1",
    "libnsl.so.1", "libresolv.so.2", "libgcc_s.so.1", "libstdc++.so.6",
    "libcrypt.so.1", "libz.so.1", "libexpat.so.1",
}

# Loaded with dlopen() at run time, so ldd does not show them.
DLOPENED = ["libopenblas.so.0"]

# The CUDA plugin's own libraries (cuBLAS, the driver) are the CUDA
# installation's: hundreds of MB, tied to the driver; not copied.
CUDA_LIBS = re.compile(r"^lib(cuda|cublas|cublasLt|cudart|nvrtc|nvJitLink)\b")


# The command line and the plugins: one wheel, so that installing it (pip,
# `sqlite-utils install`, `datasette install`) gives all three; each entry
# point is read only by its host, so none of them needs the others.
ENTRY_POINTS = """\
[console_scripts]
sqlite-sentiment = sqlite_sentiment.cli:main

[sqlite_utils]
sqlite_sentiment = sqlite_sentiment.sqlite_utils_plugin

[datasette]
sqlite_sentiment = sqlite_sentiment.datasette_plugin
"""

# Optional dependencies (pip install 'sqlite-sentiment[datasette]').
EXTRAS = {
    "parquet": ["pyarrow"],
    "sqlite-utils": ["sqlite-utils"],
    "datasette": ["datasette", "datasette-enrichments"],
}


def run(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def ldd(path):
    """{soname: resolved path or None} for path's dependencies (transitive)."""
    deps = {}
    for line in run("ldd", path).splitlines():
        m = re.match(r"\s*(\S+) => (not found|\S+)", line)
        if m:
            deps[m.group(1)] = None if m.group(2) == "not found" else m.group(2)
    return deps


def find_library(soname):
    for line in run("/sbin/ldconfig", "-p").splitlines():
        m = re.match(r"\s*(\S+) \(([^)]*)\) => (\S+)", line)
        if m and m.group(1) == soname and "x86-64" in m.group(2):
            return m.group(3)
    return None


def glibc_needed(path):
    """The newest GLIBC_2.N version path's dynamic symbols need, as (2, N)."""
    best = (2, 5)
    for v in re.findall(r"GLIBC_(\d+)\.(\d+)", run("objdump", "-T", path)):
        best = max(best, (int(v[0]), int(v[1])))
    return best


def record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--so", required=True)
    ap.add_argument("--version", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cuda")
    ap.add_argument("--patchelf", default="patchelf")
    ap.add_argument("--stage", help="staging directory (default OUT/../wheel-stage)")
    a = ap.parse_args()
    if not re.fullmatch(r"\d+\.\d+\.\d+", a.version):
        sys.exit(f"build_wheel: version {a.version!r} is not N.N.N")

    stage = a.stage or os.path.join(os.path.dirname(os.path.abspath(a.out)), "wheel-stage")
    shutil.rmtree(stage, ignore_errors=True)
    pkg = os.path.join(stage, "sqlite_sentiment")
    libs = os.path.join(pkg, "libs")
    os.makedirs(libs)
    src_pkg = os.path.join(HERE, "sqlite_sentiment")
    for fn in sorted(os.listdir(src_pkg)):
        if fn.endswith(".py") and fn != "_version.py":
            shutil.copy(os.path.join(src_pkg, fn), pkg)
    with open(os.path.join(pkg, "_version.py"), "w") as f:
        f.write("# Written by python/build_wheel.py from SX_VERSION in ext/version.h.\n")
        f.write(f'__version__ = "{a.version}"\n')
    so = os.path.join(pkg, "sentiment.so")
    shutil.copy(a.so, so)
    run("strip", "--strip-debug", so)          # keeps the symbol table
    if a.cuda:
        shutil.copy(a.cuda, os.path.join(pkg, "sentiment_cuda.so"))

    # What to copy: sentiment.so's dependencies, the dlopened ones and
    # theirs, less the manylinux base.
    wanted = dict(ldd(a.so))
    for name in DLOPENED:
        path = find_library(name)
        if not path:
            sys.exit(f"build_wheel: {name} not found (install libopenblas0)")
        wanted[name] = path
        wanted.update(ldd(path))
    copied = []
    for name, path in sorted(wanted.items()):
        if name in BASE_LIBS or name.startswith("ld-linux"):
            continue
        if path is None:
            sys.exit(f"build_wheel: {name}, needed by sentiment.so, not found")
        dst = os.path.join(libs, name)
        shutil.copy(os.path.realpath(path), dst)
        os.chmod(dst, 0o755)
        run(a.patchelf, "--set-rpath", "$ORIGIN", dst)
        copied.append(name)
    run(a.patchelf, "--set-rpath", "$ORIGIN/libs", so)

    elves = [so] + [os.path.join(libs, n) for n in copied]
    if a.cuda:
        elves.append(os.path.join(pkg, "sentiment_cuda.so"))
    major, minor = max(glibc_needed(p) for p in elves)
    tag = f"py3-none-manylinux_{major}_{minor}_x86_64"

    dist = f"sqlite_sentiment-{a.version}"
    distinfo = f"{dist}.dist-info"
    readme = open(os.path.join(HERE, "README.md"), encoding="utf-8").read()
    metadata = (
        "Metadata-Version: 2.1\n"
        "Name: sqlite-sentiment\n"
        f"Version: {a.version}\n"
        "Summary: Chinese text classification inside SQLite: sentiment(), classify(), train()\n"
        "Requires-Python: >=3.8\n"
        "Classifier: Programming Language :: C\n"
        "Classifier: Operating System :: POSIX :: Linux\n"
        "Classifier: Topic :: Database\n"
        "Description-Content-Type: text/markdown\n"
        + "".join(f"Provides-Extra: {extra}\n"
                  + "".join(f"Requires-Dist: {req}; extra == \"{extra}\"\n" for req in reqs)
                  for extra, reqs in EXTRAS.items())
        + "\n" + readme)
    wheel_meta = (
        "Wheel-Version: 1.0\n"
        "Generator: sentiment python/build_wheel.py\n"
        "Root-Is-Purelib: false\n"
        f"Tag: {tag}\n")

    os.makedirs(a.out, exist_ok=True)
    for old in os.listdir(a.out):
        if old.endswith(".whl"):
            os.remove(os.path.join(a.out, old))
    whl = os.path.join(a.out, f"{dist}-{tag}.whl")
    records = []
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        def add(arcname, data, mode):
            zi = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = (0o100000 | mode) << 16
            z.writestr(zi, data, compresslevel=9)
            records.append(record_line(arcname, data))
        for root, _, files in sorted(os.walk(stage)):
            for fn in sorted(files):
                path = os.path.join(root, fn)
                arc = os.path.relpath(path, stage)
                with open(path, "rb") as f:
                    add(arc, f.read(), 0o755 if ".so" in fn else 0o644)
        add(f"{distinfo}/METADATA", metadata.encode(), 0o644)
        add(f"{distinfo}/WHEEL", wheel_meta.encode(), 0o644)
        add(f"{distinfo}/entry_points.txt", ENTRY_POINTS.encode(), 0o644)
        records.append(f"{distinfo}/RECORD,,")
        z.writestr(f"{distinfo}/RECORD", "\n".join(records) + "\n")
    size = os.path.getsize(whl)
    print(f"{whl}: {size / 1e6:.1f} MB; vendored: {', '.join(copied)}; "
          f"newest GLIBC symbol: 2.{minor}")


if __name__ == "__main__":
    main()
