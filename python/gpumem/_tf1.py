"""TensorFlow 1's GPU configuration forms (issue 23, item 6): ``GPUOptions``,
``ConfigProto`` and ``Session``, so that TF1 configuration lines run with only
the import changed (``import gpumem as tf``; also ``tf.compat.v1.*``).

What each maps to, when a ``Session`` is made (it then initializes the devices,
as TensorFlow's first session creates them):

- ``visible_device_list="1,0"``: ``config.set_visible_devices`` of those
  physical GPUs (an id that is no GPU raises InvalidArgumentError, as TF does);
- ``ConfigProto(device_count={'GPU': n})``: only the first n GPUs visible;
- ``allow_growth=True``: ``set_memory_growth`` on every visible GPU;
- ``per_process_gpu_memory_fraction=f`` (> 0): ``set_memory_fraction`` on every
  GPU (gpumem refuses f > 1, which TensorFlow takes for unified memory).

Other fields are accepted and kept, and change nothing (there is no graph to
place or run). A second Session whose options differ from those in force raises
RuntimeError (configuration is frozen once the devices are initialized); one
with the same options is fine. Like protobuf messages, the constructors refuse
unknown fields with ValueError and wrongly typed values with TypeError.
"""

from . import _config, _devices, _lib, config as _tf_config, errors

_GPU_FIELDS = {
    "per_process_gpu_memory_fraction": 0.0,
    "allow_growth": False,
    "visible_device_list": "",
    "allocator_type": "",
    "deferred_deletion_bytes": 0,
    "polling_active_delay_usecs": 0,
    "polling_inactive_delay_msecs": 0,
    "force_gpu_compatible": False,
    "experimental": None,
}

_CONFIG_FIELDS = {
    "gpu_options": None,
    "device_count": None,
    "allow_soft_placement": False,
    "log_device_placement": False,
    "intra_op_parallelism_threads": 0,
    "inter_op_parallelism_threads": 0,
    "use_per_session_threads": False,
    "placement_period": 0,
    "device_filters": None,
    "graph_options": None,
    "operation_timeout_in_ms": 0,
    "isolate_session_state": False,
    "share_cluster_devices_in_session": False,
    "experimental": None,
}

_TYPE_WORDS = {bool: "bool, numpy.bool_", int: "int", float: "int, float",
               str: "bytes, unicode"}


def _checked(name, value, default):
    """The value as protobuf would store it, or the TypeError it raises."""
    kind = type(default)
    if default is None:  # a message or a map: checked by its owner
        return value
    if kind is bool:
        ok = isinstance(value, int)  # bool, or an int as protobuf takes
    elif kind is str:
        if isinstance(value, bytes):
            value = value.decode()
        ok = isinstance(value, str)
    else:
        ok = isinstance(value, (int, float) if kind is float else int) and \
            not isinstance(value, bool)
    if not ok:
        raise TypeError("%r has type %s, but expected one of: %s"
                        % (value, type(value).__name__, _TYPE_WORDS[kind]))
    return kind(value)


class _Message:
    _NAME = ""
    _FIELDS = {}

    def __init__(self, **fields):
        object.__setattr__(self, "_values", dict(self._FIELDS))
        for name, value in fields.items():
            if name not in self._FIELDS:
                raise ValueError('Protocol message %s has no "%s" field.'
                                 % (self._NAME, name))
            if value is not None:  # None leaves a field unset, as in protobuf
                setattr(self, name, value)

    def __setattr__(self, name, value):
        if name not in self._FIELDS:
            raise AttributeError('Assignment not allowed (no field "%s" in protocol '
                                 'message object).' % name)
        self._values[name] = _checked(name, value, self._FIELDS[name])

    def __getattr__(self, name):
        values = self.__dict__.get("_values", {})
        if name in values:
            return values[name]
        raise AttributeError(name)

    def __eq__(self, other):
        return type(self) is type(other) and self._values == other._values

    def __repr__(self):
        return "\n".join("%s: %r" % (k, v) for k, v in self._values.items()
                         if v is not None and v != self._FIELDS[k] and v != {})


class GPUOptions(_Message):
    """TF1's ``tf.GPUOptions`` (``tf.compat.v1.GPUOptions``): the GPU fields of
    a ConfigProto; applied by ``Session``."""
    _NAME = "GPUOptions"
    _FIELDS = _GPU_FIELDS


class ConfigProto(_Message):
    """TF1's ``tf.ConfigProto``: ``gpu_options`` (a GPUOptions, made empty when
    not given, so that ``config.gpu_options.allow_growth = True`` works) and
    ``device_count`` (``{'GPU': n}``); the other fields are kept unused."""
    _NAME = "ConfigProto"
    _FIELDS = _CONFIG_FIELDS

    def __init__(self, **fields):
        super().__init__(**fields)
        if self._values["gpu_options"] is None:
            self._values["gpu_options"] = GPUOptions()
        if self._values["device_count"] is None:
            self._values["device_count"] = {}

    def __setattr__(self, name, value):
        if name == "gpu_options" and not isinstance(value, (GPUOptions, type(None))):
            raise TypeError("Parameter to MergeFrom() must be instance of same class: "
                            "expected GPUOptions got %s." % type(value).__name__)
        if name == "device_count" and value is not None:
            if not isinstance(value, dict):
                raise TypeError("device_count must be a dict of device type to count, "
                                "not %s" % type(value).__name__)
            value = dict(value)
        super().__setattr__(name, value)


def _visible(config, gpus):
    """The physical GPUs the options leave visible, in their order."""
    listed = config.gpu_options.visible_device_list
    if listed:
        chosen = []
        for item in listed.split(","):
            item = item.strip()
            if not item.isdigit() or int(item) >= len(gpus):
                raise errors.InvalidArgumentError(
                    "'visible_device_list' listed an invalid Device id '%s' but visible "
                    "device count is %d" % (item, len(gpus)))
            if int(item) in chosen:
                raise errors.InvalidArgumentError(
                    "visible_device_list contained a duplicate entry: %s" % listed)
            chosen.append(int(item))
    else:
        chosen = list(range(len(gpus)))
    count = config.device_count.get("GPU")
    if count is not None:
        chosen = chosen[:max(int(count), 0)]
    return [gpus[i] for i in chosen]


def _apply(config):
    """Configures the default runtime from `config`, then initializes it; after
    initialization, checks that `config` asks for what is in force."""
    gpus = _devices.physical_gpus()
    visible = _visible(config, gpus)
    growth = config.gpu_options.allow_growth
    fraction = config.gpu_options.per_process_gpu_memory_fraction
    if fraction < 0:
        raise errors.InvalidArgumentError(
            "per_process_gpu_memory_fraction %r is negative" % fraction)
    if not _lib.is_initialized():
        if len(visible) != len(gpus) or visible != gpus:
            _config.set_visible_devices(visible, "GPU")
        if growth:
            for gpu in visible:
                _config.set_memory_growth(gpu, True)
        if fraction > 0:
            _config.set_memory_fraction(None, fraction)
        _config.initialize()
        return
    # A later session: the options are the process's since the first one.
    differs = []
    if _config.get_visible_devices("GPU") != visible:
        differs.append("visible GPUs")
    if growth and not all(_config.get_memory_growth(g) for g in visible):
        differs.append("allow_growth")
    if fraction > 0 and any(abs(_config.get_memory_fraction(g) - fraction) > 1e-12
                            for g in gpus):
        differs.append("per_process_gpu_memory_fraction")
    if differs:
        raise RuntimeError("Physical devices cannot be modified after being initialized: "
                           "this Session's GPU options (%s) differ from those in force "
                           "since the devices were initialized" % ", ".join(differs))


class Session:
    """TF1's ``tf.Session(config=...)``: applies the config's GPU options to
    the default runtime and initializes the devices. It runs no graph:
    ``run`` raises NotImplementedError. A context manager, as TF's."""

    def __init__(self, target="", graph=None, config=None):
        if config is not None and not isinstance(config, ConfigProto):
            raise TypeError("config must be a tf.ConfigProto, but got %s"
                            % type(config))
        self.target = target
        self.graph = graph
        self._config = config if config is not None else ConfigProto()
        self._closed = False
        _apply(self._config)

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        raise NotImplementedError("gpumem's Session configures GPU memory only; it runs "
                                  "no graph")

    def list_devices(self):
        return _config.list_logical_devices()

    def close(self):
        self._closed = True

    def as_default(self):
        return self

    def __enter__(self):
        if self._closed:
            raise RuntimeError("Attempted to use a closed Session.")
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class InteractiveSession(Session):
    """TF1's ``tf.InteractiveSession(config=...)``: a Session."""


class _Namespace:
    def __init__(self, **names):
        self.__dict__.update(names)


def _set_session(session):
    """``tf.compat.v1.keras.backend.set_session``: the session's options were
    applied when it was made; nothing more to do."""
    if not isinstance(session, Session):
        raise TypeError("set_session expects a Session, not %s" % type(session).__name__)


def get_session():
    """``tf.compat.v1.keras.backend.get_session``: a Session with default
    options (which initializes the devices)."""
    return Session()


v1 = _Namespace(GPUOptions=GPUOptions, ConfigProto=ConfigProto, Session=Session,
                InteractiveSession=InteractiveSession, config=_tf_config,
                keras=_Namespace(backend=_Namespace(set_session=_set_session,
                                                    get_session=get_session)))
compat = _Namespace(v1=v1)
