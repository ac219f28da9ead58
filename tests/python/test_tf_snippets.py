"""TensorFlow GPU-configuration snippets, as people copy them from the
TensorFlow guide (https://www.tensorflow.org/guide/gpu) and from answers, run
unchanged but for `import gpumem as tf`, on one, two and three simulated GPUs.

Each expected output is what TensorFlow prints for the same snippet on a
machine with that many GPUs (derived from tensorflow/python/eager/context.py:
device reprs, None for settings never made, RuntimeError sentences). Where
TensorFlow itself would fail because of a restriction gpumem lifts (memory
growth that differs between GPUs), the test says so and checks gpumem's
behaviour instead. Lines after the TensorFlow part are gpumem's own checks,
done with asserts inside the scenario.
"""

import pytest

from conftest import MACHINES, assert_output, run

GPU_COUNTS = sorted(MACHINES)


def physical(i):
    return "PhysicalDevice(name='/physical_device:GPU:%d', device_type='GPU')" % i


def logical(i):
    return "LogicalDevice(name='/device:GPU:%d', device_type='GPU')" % i


CPU_PHYSICAL = "PhysicalDevice(name='/physical_device:CPU:0', device_type='CPU')"


@pytest.mark.parametrize("n", GPU_COUNTS)
def test_num_gpus_available(n):
    out = run("""
        import gpumem as tf
        print("Num GPUs Available: ", len(tf.config.list_physical_devices('GPU')))
        print(tf.config.list_physical_devices('GPU'))
        print(tf.config.list_physical_devices('CPU'))
        print(tf.config.experimental.list_physical_devices('GPU') == tf.config.list_physical_devices('GPU'))
        """, MACHINES[n])
    assert_output(out, """
        Num GPUs Available:  %d
        [%s]
        [%s]
        True
        """ % (n, ", ".join(physical(i) for i in range(n)), CPU_PHYSICAL))


@pytest.mark.parametrize("n", GPU_COUNTS)
def test_memory_growth_on_every_gpu(n):
    out = run("""
        import gpumem as tf
        gpus = tf.config.list_physical_devices('GPU')
        if gpus:
          try:
            # Currently, memory growth needs to be the same across GPUs
            for gpu in gpus:
              tf.config.experimental.set_memory_growth(gpu, True)
            logical_gpus = tf.config.list_logical_devices('GPU')
            print(len(gpus), "Physical GPUs,", len(logical_gpus), "Logical GPUs")
          except RuntimeError as e:
            # Memory growth must be set before GPUs have been initialized
            print(e)
        print([tf.config.experimental.get_memory_growth(g) for g in gpus])

        # gpumem: growing pools have reserved nothing yet
        for i in range(len(gpus)):
            assert tf.config.experimental.get_memory_info('GPU:%d' % i)['reserved'] == 0
        """, MACHINES[n])
    assert_output(out, """
        %d Physical GPUs, %d Logical GPUs
        [%s]
        """ % (n, n, ", ".join(["True"] * n)))


@pytest.mark.parametrize("n", GPU_COUNTS)
def test_memory_growth_on_gpu0_only(n):
    # TensorFlow prints the same lines, but with more than one GPU its
    # initialization then fails ("Memory growth cannot differ between GPU
    # devices"); gpumem lifts that restriction, which the asserts check.
    out = run("""
        import gpumem as tf
        physical_devices = tf.config.experimental.list_physical_devices('GPU')
        assert len(physical_devices) > 0, "Not enough GPU hardware devices available"
        config = tf.config.experimental.set_memory_growth(physical_devices[0], True)
        print(config)
        print([tf.config.experimental.get_memory_growth(g) for g in physical_devices])

        # gpumem: GPU 0 grows, the others reserve their whole budget (greedy)
        assert len(tf.config.list_logical_devices('GPU')) == len(physical_devices)
        info = [tf.config.experimental.get_memory_info('GPU:%d' % i)
                for i in range(len(physical_devices))]
        assert info[0]['reserved'] == 0, info[0]
        for i in info[1:]:
            assert i['reserved'] == i['limit'] > 0, i
        """, MACHINES[n])
    assert_output(out, """
        None
        [%s]
        """ % ", ".join(["True"] + ["None"] * (n - 1)))


@pytest.mark.parametrize("n", GPU_COUNTS)
def test_2gb_limit_on_first_gpu(n):
    out = run("""
        import gpumem as tf
        gpus = tf.config.list_physical_devices('GPU')
        if gpus:
          # Restrict TensorFlow to only allocate 2GB of memory on the first GPU
          try:
            tf.config.set_logical_device_configuration(
                gpus[0],
                [tf.config.LogicalDeviceConfiguration(memory_limit=2048)])
            logical_gpus = tf.config.list_logical_devices('GPU')
            print(len(gpus), "Physical GPUs,", len(logical_gpus), "Logical GPUs")
          except RuntimeError as e:
            # Virtual devices must be set before GPUs have been initialized
            print(e)
        print(tf.config.get_logical_device_configuration(gpus[0]))

        # gpumem: the pool's budget is the limit, reserved up front (no growth)
        info = tf.config.experimental.get_memory_info('GPU:0')
        assert info['limit'] == info['reserved'] == 2048 << 20, info
        """, MACHINES[n])
    assert_output(out, """
        %d Physical GPUs, %d Logical GPUs
        [LogicalDeviceConfiguration(memory_limit=2048, experimental_priority=None, experimental_device_ordinal=None)]
        """ % (n, n))


@pytest.mark.parametrize("n", GPU_COUNTS)
def test_4gb_limit_with_the_experimental_names(n):
    out = run("""
        import gpumem as tf
        gpus = tf.config.experimental.list_physical_devices('GPU')
        if gpus:
            try:
                tf.config.experimental.set_virtual_device_configuration(
                    gpus[0],
                    [tf.config.experimental.VirtualDeviceConfiguration(memory_limit=4096)])
            except RuntimeError as e:
                print(e)
        print(tf.config.experimental.get_virtual_device_configuration(gpus[0]))
        print(tf.config.list_logical_devices('GPU'))

        info = tf.config.experimental.get_memory_info('GPU:0')
        assert info['limit'] == 4096 << 20, info
        """, MACHINES[n])
    assert_output(out, """
        [LogicalDeviceConfiguration(memory_limit=4096, experimental_priority=None, experimental_device_ordinal=None)]
        [%s]
        """ % ", ".join(logical(i) for i in range(n)))


@pytest.mark.parametrize("n", GPU_COUNTS)
def test_different_limits_per_gpu(n):
    out = run("""
        import gpumem as tf
        gpus = tf.config.list_physical_devices('GPU')
        for gpu, limit in zip(gpus, [1024, 2048, 4096]):
            tf.config.set_logical_device_configuration(
                gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=limit)])
        for device in tf.config.list_logical_devices('GPU'):
            print(device.name, device.device_type)
        print([tf.config.get_logical_device_configuration(g)[0].memory_limit for g in gpus])

        for i, limit in enumerate([1024, 2048, 4096][:len(gpus)]):
            assert tf.config.experimental.get_memory_info('GPU:%d' % i)['limit'] == limit << 20
        """, MACHINES[n])
    assert_output(out, "\n".join(
        ["/device:GPU:%d GPU" % i for i in range(n)] + [str([1024, 2048, 4096][:n])]))


@pytest.mark.parametrize("n", GPU_COUNTS)
def test_only_the_first_gpu_visible(n):
    out = run("""
        import gpumem as tf
        gpus = tf.config.list_physical_devices('GPU')
        if gpus:
          # Restrict TensorFlow to only use the first GPU
          try:
            tf.config.set_visible_devices(gpus[0], 'GPU')
            logical_gpus = tf.config.list_logical_devices('GPU')
            print(len(gpus), "Physical GPUs,", len(logical_gpus), "Logical GPU")
          except RuntimeError as e:
            # Visible devices must be set before GPUs have been initialized
            print(e)
        print(tf.config.get_visible_devices('GPU'))
        """, MACHINES[n])
    assert_output(out, """
        %d Physical GPUs, 1 Logical GPU
        [%s]
        """ % (n, physical(0)))


@pytest.mark.parametrize("n", GPU_COUNTS)
def test_visible_devices_plus_virtual_devices(n):
    out = run("""
        import gpumem as tf
        gpus = tf.config.list_physical_devices('GPU')
        if gpus:
          # Use only the last GPU, split into 2 virtual GPUs with 1GB memory each
          try:
            tf.config.set_visible_devices(gpus[-1], 'GPU')
            tf.config.set_logical_device_configuration(
                gpus[-1],
                [tf.config.LogicalDeviceConfiguration(memory_limit=1024),
                 tf.config.LogicalDeviceConfiguration(memory_limit=1024)])
            logical_gpus = tf.config.list_logical_devices('GPU')
            print(len(gpus), "Physical GPU,", len(logical_gpus), "Logical GPUs")
          except RuntimeError as e:
            # Virtual devices must be set before GPUs have been initialized
            print(e)
        print(tf.config.get_visible_devices())
        print(tf.config.list_logical_devices('GPU'))

        for i in (0, 1):
            assert tf.config.experimental.get_memory_info('GPU:%d' % i)['limit'] == 1 << 30
        """, MACHINES[n])
    assert_output(out, """
        %d Physical GPU, 2 Logical GPUs
        [%s, %s]
        [%s, %s]
        """ % (n, CPU_PHYSICAL, physical(n - 1), logical(0), logical(1)))


@pytest.mark.parametrize("n", GPU_COUNTS)
def test_two_virtual_gpus_on_the_first(n):
    out = run("""
        import gpumem as tf
        gpus = tf.config.list_physical_devices('GPU')
        if gpus:
          # Create 2 virtual GPUs with 1GB memory each
          try:
            tf.config.set_logical_device_configuration(
                gpus[0],
                [tf.config.LogicalDeviceConfiguration(memory_limit=1024),
                 tf.config.LogicalDeviceConfiguration(memory_limit=1024)])
            logical_gpus = tf.config.list_logical_devices('GPU')
            print(len(gpus), "Physical GPU,", len(logical_gpus), "Logical GPUs")
          except RuntimeError as e:
            # Virtual devices must be set before GPUs have been initialized
            print(e)
        print(tf.config.list_logical_devices())
        """, MACHINES[n])
    lds = ["LogicalDevice(name='/device:CPU:0', device_type='CPU')"] + [
        logical(i) for i in range(n + 1)]
    assert_output(out, """
        %d Physical GPU, %d Logical GPUs
        [%s]
        """ % (n, n + 1, ", ".join(lds)))


@pytest.mark.parametrize("n", GPU_COUNTS)
def test_configuration_after_initialization_raises_runtime_error(n):
    out = run("""
        import gpumem as tf
        gpus = tf.config.list_physical_devices('GPU')
        print(len(tf.config.list_logical_devices('GPU')), "Logical GPUs")
        attempts = [
            lambda: tf.config.experimental.set_memory_growth(gpus[0], True),
            lambda: tf.config.set_visible_devices([], 'GPU'),
            lambda: tf.config.set_logical_device_configuration(
                gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=1024)]),
            lambda: tf.config.experimental.set_virtual_device_configuration(
                gpus[-1], [tf.config.experimental.VirtualDeviceConfiguration(memory_limit=512),
                           tf.config.experimental.VirtualDeviceConfiguration(memory_limit=512)]),
        ]
        for attempt in attempts:
            try:
                attempt()
                print("no error")
            except RuntimeError as e:
                print(e)
        # Setting what is already in force is fine (a re-run notebook cell)
        tf.config.set_visible_devices(gpus, 'GPU')
        print(tf.config.experimental.get_memory_growth(gpus[0]))
        """, MACHINES[n])
    assert_output(out, """
        %d Logical GPUs
        Physical devices cannot be modified after being initialized...
        Visible devices cannot be modified after being initialized...
        Virtual devices cannot be modified after being initialized...
        Virtual devices cannot be modified after being initialized...
        None
        """ % n)
    # gpumem's message follows TensorFlow's sentence and says what initialized them
    assert "gpumem_list_logical_devices" in out.splitlines()[1]


@pytest.mark.parametrize("n", GPU_COUNTS)
def test_rerun_cell_with_the_same_configuration(n):
    out = run("""
        import gpumem as tf
        def cell():
            gpus = tf.config.list_physical_devices('GPU')
            for gpu in gpus:
                tf.config.experimental.set_memory_growth(gpu, True)
            tf.config.set_logical_device_configuration(
                gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=2048)])
            logical_gpus = tf.config.list_logical_devices('GPU')
            print(len(gpus), "Physical GPUs,", len(logical_gpus), "Logical GPUs")
        cell()
        cell()
        """, MACHINES[n])
    assert_output(out, "%d Physical GPUs, %d Logical GPUs\n" % (n, n) * 2)


@pytest.mark.parametrize("n", GPU_COUNTS)
def test_bad_values_raise_value_error(n):
    out = run("""
        import gpumem as tf
        gpus = tf.config.list_physical_devices('GPU')
        cpus = tf.config.list_physical_devices('CPU')
        attempts = [
            lambda: tf.config.experimental.set_memory_growth(cpus[0], True),
            lambda: tf.config.experimental.set_memory_growth(
                tf.config.PhysicalDevice('/physical_device:GPU:7', 'GPU'), True),
            lambda: tf.config.experimental.get_memory_growth('GPU:9'),
            lambda: tf.config.set_logical_device_configuration(
                cpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=1024)]),
            lambda: tf.config.set_visible_devices(cpus[0], 'GPU'),
            lambda: tf.config.set_logical_device_configuration(
                gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=1 << 30)]),
            lambda: tf.config.experimental.get_memory_info('CPU:0'),
        ]
        for attempt in attempts:
            try:
                attempt()
                print("no error")
            except ValueError as e:
                print("ValueError:", e)
        """, MACHINES[n])
    assert_output(out, """
        ValueError: Cannot set memory growth on non-GPU and non-Pluggable devices...
        ValueError: Unrecognized device: PhysicalDevice(name='/physical_device:GPU:7', device_type='GPU')...
        ValueError: Unrecognized device: 'GPU:9'...
        ValueError: Setting memory limit on CPU virtual devices is currently not supported
        ValueError: Unrecognized device: PhysicalDevice(name='/physical_device:CPU:0', device_type='CPU')...
        ValueError: gpumem_set_logical_device_configuration(GPU:0): memory limit...
        ValueError: Allocator stats not available for device 'CPU:0'
        """)
    # All but the sixth are TensorFlow's messages (gpumem's details follow them
    # in parentheses). TensorFlow does not check a limit against the GPU's
    # memory when it is set; gpumem refuses it at once with both numbers.


@pytest.mark.parametrize("n", GPU_COUNTS)
def test_wrong_types_raise_type_error(n):
    out = run("""
        import gpumem as tf
        gpus = tf.config.list_physical_devices('GPU')
        attempts = [
            lambda: tf.config.experimental.set_memory_growth(True, True),
            lambda: tf.config.experimental.set_memory_growth(gpus[0], 'yes'),
            lambda: tf.config.set_logical_device_configuration(
                gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit='2GB')]),
            lambda: tf.config.set_logical_device_configuration(
                gpus[0], tf.config.LogicalDeviceConfiguration(memory_limit=2048)),
            lambda: tf.config.set_visible_devices(3.5, 'GPU'),
        ]
        for attempt in attempts:
            try:
                attempt()
                print("no error")
            except TypeError as e:
                print("TypeError", isinstance(e, ValueError))
        # nothing changed: the devices are still configurable and unconfigured
        print(tf.config.experimental.get_memory_growth(gpus[0]),
              tf.config.get_logical_device_configuration(gpus[0]))
        """, MACHINES[n])
    # A device of the wrong type is also a ValueError: TensorFlow raises
    # ValueError("Unrecognized device: True") there.
    assert_output(out, """
        TypeError True
        TypeError False
        TypeError False
        TypeError False
        TypeError True
        None None
        """)


def test_no_gpu_at_all():
    out = run("""
        import gpumem as tf
        print("Num GPUs Available: ", len(tf.config.list_physical_devices('GPU')))
        gpus = tf.config.list_physical_devices('GPU')
        if gpus:
          try:
            for gpu in gpus:
              tf.config.experimental.set_memory_growth(gpu, True)
          except RuntimeError as e:
            print(e)
        print(tf.config.list_logical_devices())
        """, "")
    assert_output(out, """
        Num GPUs Available:  0
        [LogicalDevice(name='/device:CPU:0', device_type='CPU')]
        """)
