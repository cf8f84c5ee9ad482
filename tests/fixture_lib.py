"""What the fixture-logits checks share: the fixture models and the bounds every backend
(CPU levels, ARM, Vulkan) must meet against llama.cpp's logits (tests/fixtures/README.md), the
failure list and the ctest environment."""
import os
import sys

MODELS = ['tiny-f32', 'tiny-q1_0', 'tiny-q2_0', 'tiny-q2_0-g64', 'tiny-q1_0-q6k', 'tiny-q4_1', 'tiny-q8_0']
F32_WORST, Q_MEDIAN, Q_WORST, MARGIN = 1e-3, 3e-2, 6e-2, 0.3
TAPS_BOUND = 1e-4

failures = []


def fail(msg):
    print('FAIL: ' + msg)
    failures.append(msg)


def env(name):
    v = os.environ.get(name)
    if not v:
        sys.exit('%s is not set (run through ctest)' % name)
    return v
