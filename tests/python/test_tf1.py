"""TensorFlow 1's GPU configuration lines (tf.GPUOptions, tf.ConfigProto,
tf.Session, and the same under tf.compat.v1), as they are copied from TF1 code,
run with only the import changed, on simulated GPUs; then gpumem's own checks of
what each option became, and the errors raised as TensorFlow raises them."""

import pytest

from conftest import assert_output, run

GiB = 1 << 30


def test_allow_growth_from_a_config_proto():
    out = run("""
        import gpumem as tf
        config = tf.ConfigProto()
        config.gpu_options.allow_growth = True
        session = tf.Session(config=config)
        gpus = tf.config.list_physical_devices('GPU')
        print([tf.config.experimental.get_memory_growth(g) for g in gpus])
        print(tf.is_initialized())
        print(tf.config.experimental.get_memory_info('GPU:1')['reserved'])
        """)
    assert_output(out, """
        [True, True]
        True
        0
        """)


def test_per_process_fraction_from_gpu_options():
    out = run("""
        import gpumem as tf
        gpu_options = tf.GPUOptions(per_process_gpu_memory_fraction=0.25)
        sess = tf.Session(config=tf.ConfigProto(gpu_options=gpu_options))
        for i in range(2):
            print(tf.config.experimental.get_memory_info('GPU:%d' % i)['limit'])
        """)
    assert_output(out, """
        %d
        %d
        """ % (3 * GiB, 6 * GiB))


def test_compat_v1_with_keras_set_session():
    out = run("""
        import gpumem as tf
        config = tf.compat.v1.ConfigProto(allow_soft_placement=True,
                                          log_device_placement=False)
        config.gpu_options.allow_growth = True
        config.gpu_options.visible_device_list = "1"
        sess = tf.compat.v1.Session(config=config)
        tf.compat.v1.keras.backend.set_session(sess)
        print(tf.config.list_logical_devices('GPU'))
        print(tf.config.get_visible_devices('GPU'))
        print(tf.compat.v1.config is tf.config)
        """)
    assert_output(out, """
        [LogicalDevice(name='/device:GPU:0', device_type='GPU')]
        [PhysicalDevice(name='/physical_device:GPU:1', device_type='GPU')]
        True
        """)


def test_interactive_session_and_a_with_block():
    out = run("""
        import gpumem as tf
        gpu_options = tf.compat.v1.GPUOptions(allow_growth=True,
                                              per_process_gpu_memory_fraction=0.5)
        with tf.compat.v1.Session(config=tf.compat.v1.ConfigProto(gpu_options=gpu_options)) as s:
            print(tf.config.experimental.get_memory_info('GPU:0')['limit'])
        # a second session with the same options is fine
        sess = tf.InteractiveSession(config=tf.ConfigProto(gpu_options=gpu_options))
        print([d.device_type for d in sess.list_devices()])
        """, gpus="8GiB")
    assert_output(out, """
        %d
        ['CPU', 'GPU']
        """ % (4 * GiB))


def test_device_count_hides_gpus():
    out = run("""
        import gpumem as tf
        sess = tf.Session(config=tf.ConfigProto(device_count={'GPU': 0}))
        print(tf.config.list_logical_devices('GPU'))
        """)
    assert_output(out, "[]")


def test_errors_as_tensorflow_raises_them():
    out = run("""
        import gpumem as tf
        for make in (lambda: tf.GPUOptions(allow_growht=True),
                     lambda: tf.GPUOptions(allow_growth="yes"),
                     lambda: tf.GPUOptions(per_process_gpu_memory_fraction="0.4"),
                     lambda: tf.ConfigProto(gpu_options=0.5)):
            try:
                make()
            except (ValueError, TypeError) as e:
                print(type(e).__name__, e)
        opts = tf.GPUOptions()
        try:
            opts.allow_grwth = True
        except AttributeError as e:
            print("AttributeError", e)
        try:
            tf.Session(config=tf.ConfigProto(gpu_options=tf.GPUOptions(visible_device_list="5")))
        except tf.errors.InvalidArgumentError as e:
            print("InvalidArgumentError", e)
        print(tf.is_initialized())
        tf.Session(config=tf.ConfigProto(gpu_options=tf.GPUOptions(allow_growth=False)))
        try:
            tf.Session(config=tf.ConfigProto(gpu_options=tf.GPUOptions(allow_growth=True)))
        except RuntimeError as e:
            print("RuntimeError", e)
        try:
            tf.Session().run(None)
        except NotImplementedError as e:
            print("NotImplementedError", e)
        """)
    assert_output(out, """
        ValueError Protocol message GPUOptions has no "allow_growht" field.
        TypeError 'yes' has type str, but expected one of: bool, numpy.bool_
        TypeError '0.4' has type str, but expected one of: int, float
        TypeError Parameter to MergeFrom() must be instance of same class: expected GPUOptions got float.
        AttributeError Assignment not allowed (no field "allow_grwth" in protocol message object).
        InvalidArgumentError 'visible_device_list' listed an invalid Device id '5' but visible device count is 2
        False
        RuntimeError Physical devices cannot be modified after being initialized: this Session's GPU options (allow_growth) differ...
        NotImplementedError gpumem's Session configures GPU memory only; it runs no graph
        """)


@pytest.mark.parametrize("form", ["tf.GPUOptions", "tf.compat.v1.GPUOptions"])
def test_options_read_back_as_set(form):
    out = run("""
        import gpumem as tf
        o = %s(per_process_gpu_memory_fraction=0.4, allow_growth=True,
               visible_device_list="0,1")
        c = tf.ConfigProto(gpu_options=o)
        print(c.gpu_options.per_process_gpu_memory_fraction, c.gpu_options.allow_growth,
              c.gpu_options.visible_device_list, c.gpu_options == o)
        print(tf.ConfigProto().gpu_options.allow_growth)
        """ % form)
    assert_output(out, """
        0.4 True 0,1 True
        False
        """)
