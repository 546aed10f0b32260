"""Make eflomal 2.0.0's sampler reproducible: patch its unpacked source distribution in place.

eflomal 2.0.0 seeds itself from /dev/urandom, and its samplers take their generators from a
shared one in the order their threads reach a critical section, so two runs never give the same
links. After this patch:

* ``EFLOMAL_SEED`` in the environment (a decimal integer below 2**64) seeds the run; the forward
  and reverse models draw separate streams from it. Without it eflomal seeds itself as before.
* sampler i's generator is derived from the shared state and i alone (the shared state moves on
  once after each parallel loop), so the links do not depend on the number of threads.

The binary then contains the string ``EFLOMAL_SEED``: ramen.alignment.aligners checks for it.
Every edit must match the source exactly once, or this script stops without writing anything.

Usage: python3 tools/patch_eflomal.py UNPACKED_SDIST_DIR
"""

import sys
from pathlib import Path

SYSTEM_STATE = """\
static int random_system_state(random_state *state) {
    FILE *file = fopen("/dev/urandom", "rb");
"""
SEEDED_STATE = """\
/* A run with EFLOMAL_SEED set (a decimal integer below 2^64) draws the same
 * numbers every time; `stream` separates the models run from one seed. */
static int random_system_state(random_state *state, uint64_t stream) {
    const char *seed_text = getenv("EFLOMAL_SEED");
    if (seed_text != NULL) {
        uint64_t seed = 0;
        int digits = 0;
        for (const char *c = seed_text; *c != '\\0'; c++, digits++) {
            const uint64_t digit = (uint64_t)(*c - '0');
            if (*c < '0' || *c > '9' || seed > (UINT64_MAX - digit) / 10) {
                digits = 0;
                break;
            }
            seed = seed * 10 + digit;
        }
        if (digits == 0) {
            fprintf(stderr, "EFLOMAL_SEED must be a decimal integer from 0 to"
                            " 18446744073709551615, got '%s'\\n", seed_text);
            exit(EXIT_FAILURE);
        }
        *state = hash_u64_u64(hash_u64_u64(seed + 0x9e3779b97f4a7c15ULL)
                              ^ ((stream + 1) * 0xbf58476d1ce4e5b9ULL));
        // xorshift stays at 0 forever
        if (*state == 0) *state = 0x9e3779b97f4a7c15ULL;
        return 0;
    }
    FILE *file = fopen("/dev/urandom", "rb");
"""
TASK_STATE = """\
/* The generator of parallel task `index`, from `state` and `index` alone: the
 * same numbers whichever thread runs the task, in whatever order. */
static inline random_state random_task_state(random_state state, uint64_t index) {
    const random_state x = hash_u64_u64(state ^ hash_u64_u64(index + 1));
    return x? x: 0x9e3779b97f4a7c15ULL;
}

/* Sample from an unnormalized cumulative categorical distribution.
"""

RANDOMIZE_LOOP = """\
        random_state local_state;
#pragma omp critical
        {
            local_state = random_split_state(&state);
        }
        text_alignment_randomize(tas[i], &local_state);
    }
"""
SAMPLE_LOOP_HEAD = """\
                random_state local_state;
#pragma omp critical
                {
                    local_state = random_split_state(&state);
                }
                tas[i]->model = m;
"""
SAMPLE_LOOP_TAIL = """\
                    text_alignment_sample(tas[i], &local_state, NULL, NULL, 1);
                }
            }
"""

EDITS = {
    "src/random.c": [
        ("#include <time.h>\n", "#include <time.h>\n#include <stdio.h>\n#include <stdlib.h>\n"),
        (SYSTEM_STATE, SEEDED_STATE),
        ("/* Sample from an unnormalized cumulative categorical distribution.\n", TASK_STATE),
    ],
    "src/eflomal.c": [
        ("    random_system_state(&state);\n", "    random_system_state(&state, (uint64_t)reverse);\n"),
        (RANDOMIZE_LOOP, """\
        random_state local_state = random_task_state(state, (uint64_t)i);
        text_alignment_randomize(tas[i], &local_state);
    }
    random_split_state(&state);
"""),
        (SAMPLE_LOOP_HEAD, """\
                random_state local_state = random_task_state(state, (uint64_t)i);
                tas[i]->model = m;
"""),
        (SAMPLE_LOOP_TAIL, SAMPLE_LOOP_TAIL + "            random_split_state(&state);\n"),
    ],
    # A local version label, so that `pip list` says which build is installed.
    "setup.py": [("    version='2.0.0',\n", "    version='2.0.0+seeded',\n")],
}


def main(root: Path) -> None:
    patched = {}
    for name, edits in EDITS.items():
        path = root / name
        if not path.is_file():
            sys.exit(f"patch_eflomal: {path} not found: is {root} the unpacked eflomal 2.0.0 sdist?")
        text = path.read_text()
        for old, new in edits:
            found = text.count(old)
            if found != 1:
                sys.exit(f"patch_eflomal: {path}: expected this text once, found it {found} times "
                         f"(is this eflomal 2.0.0?):\n{old}")
            text = text.replace(old, new)
        patched[path] = text
    for path, text in patched.items():  # only once every edit has matched
        path.write_text(text)
    print(f"patch_eflomal: {len(patched)} files patched in {root}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
