"""Three logical devices on one simulated GPU, from Python.

The GPU is split into three logical devices of 1, 2 and 4 GiB that grow on
demand; a 64 MiB buffer on the second one is filled and read back through its
memoryview, and the memory info is printed before, during and after.

Run it from a source checkout after `meson setup build && meson compile -C build`:

    python3 examples/python_logical_devices.py

It sets GPUMEM_BACKEND=sim and a 12 GiB simulated GPU unless the environment
already chooses (the default runtime reads the environment once, at the first
gpumem call, so they are set before that).
"""

import hashlib
import os
import sys

os.environ.setdefault("GPUMEM_BACKEND", "sim")
os.environ.setdefault("GPUMEM_SIM_DEVICES", "12GiB")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import gpumem as tf  # noqa: E402  (the environment above comes first)

MIB = 1 << 20


def show(when, devices):
    print(when)
    for d in devices:
        info = tf.config.experimental.get_memory_info(d.name)
        print("  %-14s current %4d MiB  peak %4d MiB  reserved %4d MiB  limit %4d MiB"
              % (d.name, info["current"] // MIB, info["peak"] // MIB,
                 info["reserved"] // MIB, info["limit"] // MIB))


gpus = tf.config.list_physical_devices("GPU")
print(gpus[0], tf.config.experimental.get_device_details(gpus[0]))

tf.config.experimental.set_memory_growth(gpus[0], True)
tf.config.set_logical_device_configuration(gpus[0], [
    tf.config.LogicalDeviceConfiguration(memory_limit=1024),
    tf.config.LogicalDeviceConfiguration(memory_limit=2048),
    tf.config.LogicalDeviceConfiguration(memory_limit=4096),
])
logical = tf.config.list_logical_devices("GPU")
print(len(gpus), "Physical GPU,", len(logical), "Logical GPUs")
for d in logical:
    print(" ", d)

show("before:", logical)

pattern = bytes(range(256)) * (64 * MIB // 256)
with tf.malloc(64 * MIB, device=logical[1]) as buf:
    with buf.memoryview() as view:
        view[:] = pattern                          # fill through the buffer protocol
        same = hashlib.sha256(view).hexdigest() == hashlib.sha256(pattern).hexdigest()
    print("filled %s; read back %s" % (buf, "intact" if same else "CORRUPTED"))
    show("with the buffer:", logical)

show("after free (the pool keeps its memory cached):", logical)
print("release_unused gave back %d MiB" % (tf.release_unused() // MIB))
show("after release_unused:", logical)
sys.exit(0 if same else 1)
