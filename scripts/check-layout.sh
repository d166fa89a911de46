#!/bin/sh
# check-layout.sh: no file outside cpu/ and gpu/ decides anything by a
# backend's name (DESIGN: a backend's name is for messages; its slots say
# what it can do). The include rules are the compiler's
# (scripts/include-views.sh, tests/scripts/test_layering.sh).
#
# A backend is any identifier declared somewhere in the tree as a backend
# pointer (backend *be, const backend *lane, backend **out, fields such as
# rt_engine.be). Outside cpu/ and gpu/, each X->name of such an X must be an
# argument of a message call (sm_error, snprintf, printf-like, sx_fail,
# ...), so no comparison, assignment to a variable or other use can read it,
# however it is spelled (a backend naming itself, X->name = "...", is not a
# read). Prints each offending place and exits 1, else one
# line saying what it checked. Run by make test (TEST_SCRIPTS);
# $CHECK_LAYOUT_EXTRA names more files to check (the planted cases of
# tests/scripts/test_layering.sh).
set -eu
cd "$(dirname "$0")/.."
exec python3 - <<'PY'
import os, re, subprocess, sys
files = subprocess.run(["git", "ls-files", "*.c", "*.h", "*.cu", "*.cuh", "*.cpp"],
                       capture_output=True, text=True, check=True).stdout.split()
files = [f for f in files if not f.startswith("tests/gpu/cuda_emu/")]
files += os.environ.get("CHECK_LAYOUT_EXTRA", "").split()  # tests/scripts/test_layering.sh
strip = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'', re.S)
text = {}
for f in files:
    try:
        src = open(f, encoding="utf-8", errors="replace").read()
    except OSError:
        continue
    # comments and literals blanked (same length, so offsets stay)
    text[f] = strip.sub(lambda m: '"' + " " * (len(m.group(0)) - 2) + '"'
                        if m.group(0)[0] in "\"'" else " " * len(m.group(0)), src)
decl = re.compile(r'\bbackend\s*\*+\s*(?:const\s+)?([A-Za-z_]\w*)')
names = set()
for t in text.values():
    names.update(decl.findall(t))
message = {"sm_error", "snprintf", "fprintf", "printf", "sqlite3_mprintf", "sqlite3_snprintf",
           "sx_fail", "put_err", "cu_error", "print_message", "print_error", "fail_msg",
           "vsnprintf", "say", "fail"}
use = re.compile(r'\b([A-Za-z_]\w*)\s*->\s*name\b')
bad = 0
checked = 0
for f, t in text.items():
    if f.startswith(("cpu/", "gpu/")):
        continue
    checked += 1
    for m in use.finditer(t):
        if m.group(1) not in names:
            continue
        if re.match(r'\s*=[^=]', t[m.end():m.end() + 3]):
            continue  # a backend (the tests' stand-in) naming itself
        # the innermost call around the use
        depth, i, call = 0, m.start() - 1, None
        while i >= 0:
            c = t[i]
            if c in ")]":
                depth += 1
            elif c in "([":
                if depth == 0:
                    if c == "(":
                        j = i - 1
                        while j >= 0 and t[j].isspace():
                            j -= 1
                        k = j
                        while k >= 0 and (t[k].isalnum() or t[k] == "_"):
                            k -= 1
                        call = t[k + 1:j + 1]
                    break
                depth -= 1
            elif c in ";{}" and depth == 0:
                break
            i -= 1
        if call not in message:
            line = t.count("\n", 0, m.start()) + 1
            print(f"check-layout: {f}:{line}: {m.group(0)} read outside a message "
                  f"(in {call + '()' if call else 'an expression'})", file=sys.stderr)
            bad += 1
if bad:
    sys.exit(1)
print(f"check-layout: ok: {checked} files outside cpu/ and gpu/ read a backend's name "
      f"only in messages ({len(names)} backend identifiers)")
PY
