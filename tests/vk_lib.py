"""vk_lib: how the Vulkan tests in Python turn the validation layer on: where
VK_LAYER_KHRONOS_validation is installed, BITSPARK_VK_VALIDATE=1 (any message then fails the
test); where it is not, they say so and run the rest without it."""
import os
import subprocess


def validation_env(bitspark, base=None):
    """base (os.environ by default) with BITSPARK_VK_VALIDATE=1 where the layer is installed."""
    e = dict(os.environ if base is None else base)
    e['BITSPARK_VK_VALIDATE'] = '1'
    r = subprocess.run([bitspark, 'devices'], capture_output=True, text=True, env=e)
    if 'VK_LAYER_KHRONOS_validation is not installed' in r.stdout + r.stderr:
        print('note: VK_LAYER_KHRONOS_validation is not installed: the validation checks are skipped')
        e.pop('BITSPARK_VK_VALIDATE')
    return e
