/* gpumem: GPU memory management with TensorFlow's tf.config vocabulary.
 *
 * A runtime enumerates the physical GPUs of a backend (CUDA, or GPUs simulated in
 * host virtual memory), lets the program choose per GPU between greedy
 * pre-allocation, on-demand growth, a memory fraction and several logical devices
 * with hard limits, and then serves every allocation of a logical device from a
 * best-fit-with-coalescing arena over memory taken from the GPU in regions.
 *
 * Lifecycle: configure -> initialize -> serve.
 *   1. Configuration calls (visibility, growth, fraction, logical devices) may be
 *      made and remade any number of times. Enumerating physical devices never
 *      initializes anything.
 *   2. gpumem_initialize(), or implicitly the first gpumem_list_logical_devices(),
 *      gpumem_malloc() or gpumem_malloc_async() of a size above 0,
 *      gpumem_get_memory_info() or gpumem_cuda_device_logical()
 *      (and so the framework hooks' first allocation), builds one pool per logical
 *      device. A GPU without growth reserves its whole budget now; a GPU with
 *      growth reserves nothing yet.
 *   3. After that, a configuration call that would change anything fails with
 *      GPUMEM_ERR_ALREADY_INITIALIZED and changes nothing; one that sets the value
 *      already in force succeeds and does nothing.
 *
 * fork(): a runtime belongs to one process. In a forked child (multiprocessing's
 * 'fork' start method, a C program's fork()), a runtime of the parent that was
 * initialized there, or that runs on CUDA (creating it initialized the driver,
 * which a forked child cannot use), is refused: every call that takes it, the
 * default runtime (NULL) and the framework hooks included, fails with
 * GPUMEM_ERR_UNSUPPORTED before taking any lock or calling the driver, and the
 * message names the parent's pid and says what to do (start workers with the
 * 'spawn' method, or create and initialize a runtime in the child; on CUDA only
 * 'spawn', since the driver cannot be initialized again there). UNSUPPORTED,
 * not BACKEND: no driver call failed; the use itself is not possible in this
 * process. gpumem_runtime_destroy() of such a runtime in the child frees the
 * child's copy of its host bookkeeping only (the device memory stays the
 * parent's); the parent is unaffected. A runtime that was only created and
 * configured over simulated GPUs holds nothing but host configuration: the
 * child adopts its copy on first use, and may reconfigure, initialize and use
 * it as its own (the parent's copy stays the parent's), unless another thread
 * was inside a call on it at the moment of the fork (configuring it, reading its
 * configuration or initializing it: refused, since that call's lock stays held in
 * the child's copy). A child cannot get a fresh default runtime: an
 * initialized parent's stays refused there (as PyTorch refuses CUDA in a forked
 * child of a parent that initialized it); create a runtime instead.
 * gpumem_runtime_create() with GPUMEM_BACKEND=cuda or auto fails with
 * GPUMEM_ERR_UNSUPPORTED in a forked child of a process where gpumem
 * initialized the driver (auto does not fall back to simulated GPUs there).
 * Where there is no fork(), none of this applies.
 *
 * Budget of a logical device: the smallest of its memory limit, the GPU's fraction
 * times its total memory, and what the GPU has free at initialization. Without a
 * limit or a fraction the GPU's budget is its free memory minus a headroom for the
 * driver (TensorFlow's table; GPUMEM_MIN_SYSTEM_MEMORY_MB overrides it). Limits are
 * taken in order and exactly (rounded down to whole 256-byte granules), as far as
 * the free memory goes; the headroom comes only out of what the logical devices
 * without a limit share. Growth never takes more than the budget.
 *
 * Errors: every function returns a gpumem_status and writes results through
 * out-parameters, only on success. Nothing aborts or prints on bad input.
 * Besides the statuses each function lists, every call that takes a runtime may
 * return those of creating the default one when given NULL (gpumem_runtime_create's),
 * GPUMEM_ERR_UNSUPPORTED where fork() above says so, GPUMEM_ERR_INVALID_ARGUMENT
 * for a NULL out-parameter or a handle that is not a runtime's, and, when it
 * initializes the runtime, gpumem_initialize's.
 * gpumem_last_error() gives a message for the calling thread's last failure. In
 * messages, "GPU:N" is physical GPU N (/physical_device:GPU:N, CUDA ordinal N) and
 * "/device:GPU:k" is logical device k, as TensorFlow names them.
 * Printing: never, except for what no program could otherwise see: a failed
 * gpumem_torch_malloc (PyTorch ignores the NULL), a gpumem_torch_free that the
 * driver failed (the block stays allocated), and two warnings of the default
 * runtime (no callback can be given to it): its growth setting overridden by
 * GPUMEM_FORCE_ALLOW_GROWTH / TF_FORCE_GPU_ALLOW_GROWTH, and `auto` falling back
 * to simulated GPUs because a driver that is there fails cuInit (another error
 * than no device), each one line on standard error; and, when GPUMEM_LOG_LEVEL
 * asks for it, the log of a runtime given no callback.
 *
 * Thread safety: every function may be called from any thread at any time, except
 * gpumem_runtime_destroy(), which must not overlap any other call on that runtime.
 * A runtime argument of NULL means the process-wide default runtime, created from
 * the environment on first use. */
#ifndef GPUMEM_H
#define GPUMEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#if !defined(_WIN32)
#include <sys/types.h> /* ssize_t, for gpumem_ssize (outside extern "C") */
#endif

/* The soname's number (libgpumem.so.N) changes with every ABI break, which before
 * 1.0 a minor release may make: 0.2 is libgpumem.so.1 (struct_size added). */
#define GPUMEM_VERSION_MAJOR 0
#define GPUMEM_VERSION_MINOR 2
#define GPUMEM_VERSION_PATCH 0
#define GPUMEM_VERSION_NUMBER                                                            \
    (GPUMEM_VERSION_MAJOR * 10000 + GPUMEM_VERSION_MINOR * 100 + GPUMEM_VERSION_PATCH)
#define GPUMEM_VERSION_STRING "0.2.0"

#if defined(_WIN32) && defined(GPUMEM_BUILDING_SHARED)
#define GPUMEM_API __declspec(dllexport)
#elif defined(_WIN32) && defined(GPUMEM_USING_SHARED)
#define GPUMEM_API __declspec(dllimport)
#elif defined(__GNUC__)
#define GPUMEM_API __attribute__((visibility("default")))
#else
#define GPUMEM_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- types -- */

typedef struct gpumem_runtime gpumem_runtime;

/* Status codes. The numbers are stable and never reused. */
typedef enum gpumem_status {
    GPUMEM_OK = 0,
    /* NULL out-pointer, bad value, contradictory configuration */
    GPUMEM_ERR_INVALID_ARGUMENT = 1,
    /* index out of range, or the device is not visible */
    GPUMEM_ERR_NO_SUCH_DEVICE = 2,
    /* configuration after the devices were initialized */
    GPUMEM_ERR_ALREADY_INITIALIZED = 3,
    /* a logical limit, the device's memory or host memory is exhausted */
    GPUMEM_ERR_OUT_OF_MEMORY = 4,
    /* free of a pointer this runtime does not own, or a double free */
    GPUMEM_ERR_INVALID_POINTER = 5,
    /* a driver failure; the message names the call and its error */
    GPUMEM_ERR_BACKEND = 6,
    /* not available with this backend or build, or in this process (a runtime
     * of the parent's in a forked child: see fork() at the top) */
    GPUMEM_ERR_UNSUPPORTED = 7
} gpumem_status;

/* Struct sizes (the ABI rule, as Win32's cbSize and Vulkan's sType): each struct
 * the library fills or reads through a pointer, gpumem_physical_device,
 * gpumem_logical_device_config, gpumem_logical_device, gpumem_memory_info and
 * gpumem_driver_call, begins with `uint32_t struct_size`, which the CALLER sets to
 * the sizeof the struct had where the program was compiled. GPUMEM_STRUCT_INIT(type)
 * is an initializer that sets it and zeroes every other field:
 *
 *     gpumem_memory_info info = GPUMEM_STRUCT_INIT(gpumem_memory_info);
 *     gpumem_physical_device gpus[8] = {GPUMEM_STRUCT_INIT(gpumem_physical_device)};
 *
 * A later version only appends fields, and the library writes and reads no byte
 * past the caller's struct_size: a program built against an older gpumem.h keeps
 * working with a newer library (a field it does not know is never written, and one
 * the library reads takes its default, 0). Arrays (the list functions and the
 * logical device configuration calls): only the first element's struct_size is
 * read; it is the size of every element, the stride the library walks the array
 * with, and the library writes it into each element it fills (the others'
 * struct_size is not read). So the initializer above on element 0 is enough, as
 * is setting out[0].struct_size of an array from malloc. With a capacity (or n) of
 * 0 no element is read.
 * A struct_size of 0 (not set), below the first version's size (gpumem 0.2), or
 * above this library's sizeof (a program built against a newer gpumem.h than the
 * library it runs with, or a struct_size never set) fails with
 * GPUMEM_ERR_INVALID_ARGUMENT, changes nothing, and the message says how to set it.
 * gpumem_options (gpumem_options_init) and gpumem_allocator (filled whole by the
 * library) carry a struct_size too, with the rules given at each. */
#if defined(__cplusplus)
} /* extern "C": a template cannot have C linkage */
/* C++ has designated initializers only from C++20, and warns of the fields a
 * shorter brace list leaves out: a value-initialized copy instead. */
template <typename T> inline T gpumem__struct_init()
{
    T t{};
    t.struct_size = static_cast<uint32_t>(sizeof(T));
    return t;
}
extern "C" {
#define GPUMEM_STRUCT_INIT(type) gpumem__struct_init<type>()
#else
/* clang-format off */
#define GPUMEM_STRUCT_INIT(type) {.struct_size = (uint32_t)sizeof(type)}
/* clang-format on */
#endif

typedef struct gpumem_physical_device {
    uint32_t struct_size; /* set by the caller: see "Struct sizes" above */
    int index;            /* 0..n-1 in enumeration order */
    char name[64];        /* "/physical_device:GPU:0" */
    char model[128];      /* "NVIDIA H100 80GB HBM3", "gpumem simulated GPU" */
    uint64_t total_bytes; /* the device's whole memory */
    int compute_major, compute_minor;
    /* Appended after gpumem 0.2: the GPU's UUID as nvidia-smi prints it,
     * "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (cuDeviceGetUuid); "" when the
     * driver cannot tell. Simulated GPUs: "GPU-" and a UUID derived from
     * GPUMEM_SIM_MACHINE and the index (the same in every process of that machine),
     * or one drawn at random per process without it. Names the GPU's ledger. */
    char uuid[48];
} gpumem_physical_device;

/* Read by gpumem_set_logical_device_configuration and filled by its getter: the
 * caller sets struct_size here too, so that a field appended later (TensorFlow's
 * LogicalDeviceConfiguration gained experimental_priority, then
 * experimental_device_ordinal) takes its default for a program that does not
 * know it, and an array of them keeps the caller's stride. */
typedef struct gpumem_logical_device_config {
    uint32_t struct_size;        /* set by the caller: see "Struct sizes" above */
    uint64_t memory_limit_bytes; /* hard cap of this logical device; 0 = none */
    int priority;                /* kept for parity with TensorFlow; unused */
} gpumem_logical_device_config;

/* A logical device configuration capped at `bytes` (0: no cap), struct_size set,
 * as tf.config.LogicalDeviceConfiguration(memory_limit=...):
 *
 *     gpumem_logical_device_config one_gib = GPUMEM_LOGICAL_DEVICE_LIMIT(1u << 30);
 *     gpumem_logical_device_config two[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(1u << 30),
 *                                            GPUMEM_LOGICAL_DEVICE_LIMIT(2u << 30)};
 */
#if defined(__cplusplus)
#define GPUMEM_LOGICAL_DEVICE_LIMIT(bytes)                                               \
    {                                                                                    \
        static_cast<uint32_t>(sizeof(gpumem_logical_device_config)),                     \
            static_cast<uint64_t>(bytes), 0                                              \
    }
#else
#define GPUMEM_LOGICAL_DEVICE_LIMIT(bytes)                                               \
    {                                                                                    \
        .struct_size = (uint32_t)sizeof(gpumem_logical_device_config),                   \
        .memory_limit_bytes = (uint64_t)(bytes)                                          \
    }
#endif

typedef struct gpumem_logical_device {
    uint32_t struct_size;        /* set by the caller: see "Struct sizes" above */
    int index;                   /* global logical index, 0.. across visible GPUs */
    char name[64];               /* "/device:GPU:1" */
    int physical_index;          /* the physical GPU it lives on */
    uint64_t memory_limit_bytes; /* its budget: limit, fraction and free memory */
    bool memory_growth;          /* true: memory on demand; false: reserved at init */
} gpumem_logical_device;

/* A consistent snapshot of one logical device's pool. Byte counts of allocations
 * are in the arena's 256-byte granules (a 100-byte request counts 256), as
 * TensorFlow's bytes_in_use does. */
typedef struct gpumem_memory_info {
    uint32_t struct_size;         /* set by the caller: see "Struct sizes" above */
    uint64_t current_bytes;       /* in live allocations (TF "current") */
    uint64_t peak_bytes;          /* highest current_bytes since creation or reset */
    uint64_t reserved_bytes;      /* taken from the device: in use plus cached free */
    uint64_t peak_reserved_bytes; /* highest reserved_bytes since creation or reset */
    uint64_t limit_bytes;         /* the pool's budget; reserved_bytes never exceeds it */
    uint64_t largest_free_block;  /* largest request served without growing; 0: none */
    uint64_t num_allocs;          /* successful gpumem_malloc calls (creation, reset) */
    uint64_t num_frees;           /* successful gpumem_free calls of non-NULL pointers */
    uint64_t num_ooms;            /* gpumem_malloc calls failed with OUT_OF_MEMORY */
    /* After gpumem 0.2 (check struct_size): totals since the pool was made, never
     * reset (gpumem_reset_memory_stats resets the peaks below with the others). */
    uint64_t reserved_total_bytes; /* ever taken from the device; given back: this
                                      minus reserved_bytes */
    uint64_t freed_total_bytes;    /* of allocations ever freed (a block kept for
                                      its recorded streams counts when it goes) */
    uint64_t live_blocks;          /* allocations live now (kept ones included) */
    uint64_t peak_live_blocks;     /* highest live_blocks since creation or reset */
    uint64_t num_allocs_total;     /* allocations ever made */
    uint64_t segments;             /* address ranges the pool's memory forms now:
                                      regions that touch join into one */
    uint64_t peak_segments;        /* highest segments since creation or reset */
    uint64_t segments_total;       /* segments ever formed; gone: this minus
                                      segments */
    uint64_t num_alloc_retries;    /* growths tried again after out of memory, once
                                      free regions were given back */
    uint64_t num_sync_all_streams; /* waits for the work of every stream that freed
                                      memory (at the budget, and in a release) */
    /* After gpumem 0.2 (check struct_size): PyTorch's "inactive split" blocks, the
     * free blocks of segments that hold other blocks (cached memory that cannot go
     * back to the device with its segment). Here: the free chunks of a segment (as
     * in `segments`) that holds more than one chunk, streams' free memory included,
     * each with its bytes that are mapped; the granules of a free chunk that a
     * release or the trim gave back are not, and a chunk with none mapped is not
     * counted (PyTorch leaves its expandable segments out of these figures;
     * gpumem counts its growing pools as every pool). As PyTorch's, each
     * allocation, free or other change adds its net change: an increase to the
     * _total (never reset; decreases: the _total minus the figure) and maybe the
     * peak (reset by gpumem_reset_memory_stats). */
    uint64_t inactive_split_blocks;       /* such free chunks now */
    uint64_t peak_inactive_split_blocks;  /* highest since creation or reset */
    uint64_t inactive_split_blocks_total; /* sum of the increases */
    uint64_t inactive_split_bytes;        /* their mapped bytes now */
    uint64_t peak_inactive_split_bytes;   /* highest since creation or reset */
    uint64_t inactive_split_bytes_total;  /* sum of the increases */
} gpumem_memory_info;

/* Backend selection for gpumem_options.backend. */
typedef enum gpumem_backend_kind {
    GPUMEM_BACKEND_FROM_ENV = 0, /* GPUMEM_BACKEND, or auto when it is unset */
    GPUMEM_BACKEND_AUTO = 1,     /* CUDA when a device is found, else simulated */
    GPUMEM_BACKEND_SIM = 2,      /* simulated GPUs in host virtual memory */
    GPUMEM_BACKEND_CUDA = 3      /* the CUDA driver, loaded at run time */
} gpumem_backend_kind;

typedef enum gpumem_log_level {
    GPUMEM_LOG_ERROR = 0,
    GPUMEM_LOG_WARNING = 1,
    GPUMEM_LOG_INFO = 2,
    GPUMEM_LOG_DEBUG = 3
} gpumem_log_level;

/* Receives the library's diagnostics; the library itself never prints (but for
 * the cases under "Printing" at the top).
 * Called on the thread that made the call, before that call returns, with no
 * gpumem lock held (a message logged under a lock waits for it, unless host memory
 * to keep it runs out): it may call gpumem (to read a pool's numbers after an
 * error, say), and the call being logged keeps its own last error. Calls on
 * several threads can overlap: the callback must be thread-safe. A message is at
 * most 1023 bytes; a longer one ends with "...". */
typedef void (*gpumem_log_fn)(void *user_data, int level, const char *message);

/* Ignore every GPUMEM_* / TF_* variable: only the fields below count. */
#define GPUMEM_OPTIONS_IGNORE_ENVIRONMENT 0x1u
/* Growing pools on an address range (CUDA's VMM, simulated GPUs) give back
 * granules of their holes that stayed free across a window
 * (GPUMEM_GROWTH_TRIM_WINDOW) before mapping past their peak, as
 * GPUMEM_GROWTH_TRIM=on, the default: a peak of reserved bytes close to live bytes and
 * never above the peak without it (placement does not change), for the driver calls that
 * map given-back granules again when allocations land on them (README, "Growth";
 * docs/bench.md); once such landings have mapped back as much as the peak (over the
 * window), the trim stops for good. This flag turns
 * it on over GPUMEM_GROWTH_TRIM=off; GPUMEM_OPTIONS_NO_TRIM_GROWTH turns it off
 * (and wins when both are set): peak reserved then grows by what requests lack
 * and never comes down before a release. */
#define GPUMEM_OPTIONS_TRIM_GROWTH    0x2u
#define GPUMEM_OPTIONS_NO_TRIM_GROWTH 0x4u

/* Options of gpumem_runtime_create(). Zero fields mean "from the environment, else
 * the default". Initialize with gpumem_options_init() so that fields added in later
 * versions get their defaults. */
typedef struct gpumem_options {
    uint32_t struct_size;    /* sizeof(gpumem_options); set by gpumem_options_init */
    uint32_t flags;          /* GPUMEM_OPTIONS_* bits */
    int32_t backend;         /* a gpumem_backend_kind; 0 = GPUMEM_BACKEND, else auto */
    int32_t log_level;       /* highest gpumem_log_level passed to `log` (with `log`
                                set; without, GPUMEM_LOG_LEVEL decides) */
    const char *sim_devices; /* GPUMEM_SIM_DEVICES syntax; NULL = from the environment */
    gpumem_log_fn log;       /* NULL = none, or standard error (GPUMEM_LOG_LEVEL) */
    void *log_user_data;     /* passed to `log` */
} gpumem_options;

/* ------------------------------------------------------------- runtime -- */

/* The version of the loaded library, GPUMEM_VERSION_NUMBER of its build. */
GPUMEM_API unsigned gpumem_version(void);

/* Sets every field of *opts to its default (zero) and struct_size.
 * Returns: GPUMEM_OK; GPUMEM_ERR_INVALID_ARGUMENT if opts is NULL. */
GPUMEM_API gpumem_status gpumem_options_init(gpumem_options *opts);

/* Creates a runtime over the backend chosen by opts (NULL: everything from the
 * environment). The environment is read once, here.
 * Returns: GPUMEM_OK;
 *          GPUMEM_ERR_INVALID_ARGUMENT out is NULL, or a bad option or variable
 *                                      (the message names it);
 *          GPUMEM_ERR_BACKEND          the backend could not be started;
 *          GPUMEM_ERR_UNSUPPORTED      CUDA (or auto) in a forked child of a
 *                                      process where gpumem initialized the
 *                                      driver (see fork() at the top);
 *          GPUMEM_ERR_OUT_OF_MEMORY    host memory exhausted. */
GPUMEM_API gpumem_status gpumem_runtime_create(const gpumem_options *opts,
                                               gpumem_runtime **out);

/* Gives every region back to the device and frees the runtime. Pointers it
 * returned become invalid, and so does the handle: passing it to a later call is
 * a use after free, as with free(). Such a call fails with
 * GPUMEM_ERR_INVALID_ARGUMENT only while the freed memory has not been reused; a
 * runtime created later may get the same address. NULL (the default runtime) is
 * ignored. In a forked child, a runtime of the parent's that the child has not
 * adopted (see fork() at the top) is only forgotten: the child's copy of its host
 * bookkeeping is freed, without a driver call and without waiting on a lock.
 * Threads: NOT safe: no other call on this runtime may be in flight. */
GPUMEM_API void gpumem_runtime_destroy(gpumem_runtime *rt);

/* ------------------------------------------------------- configuration -- */

/* Lists the physical GPUs (two-call idiom: out may be NULL to ask for *count; with
 * a short capacity, fills what fits and still reports the full count). Never
 * initializes anything. Invisible GPUs are listed too. out[0].struct_size is the
 * size of every element (see "Struct sizes").
 * Returns: GPUMEM_OK; GPUMEM_ERR_INVALID_ARGUMENT count is NULL, out is NULL
 *          with a non-zero capacity, or out[0].struct_size is wrong. */
GPUMEM_API gpumem_status gpumem_list_physical_devices(gpumem_runtime *rt,
                                                      gpumem_physical_device *out,
                                                      size_t capacity, size_t *count);

/* Makes exactly the GPUs in physical[0..n) visible, in ascending index order (as
 * tf.config.set_visible_devices); n = 0 hides every GPU. Default: all visible.
 * When:    before initialization (after it, only the setting in force succeeds).
 * Returns: GPUMEM_OK;
 *          GPUMEM_ERR_INVALID_ARGUMENT    physical NULL with n > 0, or an index twice;
 *          GPUMEM_ERR_NO_SUCH_DEVICE      an index out of range;
 *          GPUMEM_ERR_ALREADY_INITIALIZED a change after initialization. */
GPUMEM_API gpumem_status gpumem_set_visible_devices(gpumem_runtime *rt,
                                                    const int *physical, size_t n);

/* The visible physical GPUs' indices, ascending (two-call idiom). */
GPUMEM_API gpumem_status gpumem_get_visible_devices(gpumem_runtime *rt, int *out,
                                                    size_t capacity, size_t *count);

/* Makes GPU `physical` grow its pools on demand (true) instead of reserving its
 * whole budget at initialization (false: TensorFlow's default). Each GPU has its
 * own setting, and growth combines with limits and logical devices. A growing pool
 * takes new regions and never extends one in place: a request larger than the
 * budget still unreserved fails even when a free tail of a region in use would
 * make up the difference. GPUMEM_FORCE_ALLOW_GROWTH or TF_FORCE_GPU_ALLOW_GROWTH,
 * when set, is every GPU's setting until it is set here, and overrides this
 * setting at initialization (a WARNING in the log; on standard error for the
 * default runtime), as TensorFlow's variable overrides its configuration;
 * gpumem_get_memory_growth returns the setting, and gpumem_list_logical_devices
 * what was applied.
 * When:    before initialization (after it, only the value last set succeeds).
 * Returns: GPUMEM_OK;
 *          GPUMEM_ERR_NO_SUCH_DEVICE      `physical` out of range;
 *          GPUMEM_ERR_ALREADY_INITIALIZED a change after initialization. */
GPUMEM_API gpumem_status gpumem_set_memory_growth(gpumem_runtime *rt, int physical,
                                                  bool enable);
GPUMEM_API gpumem_status gpumem_get_memory_growth(gpumem_runtime *rt, int physical,
                                                  bool *enabled);

/* Caps GPU `physical` (-1: every GPU) at `fraction` of its total memory, as
 * TensorFlow's per_process_gpu_memory_fraction, but per GPU. 0 clears it.
 * When:    before initialization (after it, only the setting in force succeeds).
 * Returns: GPUMEM_OK;
 *          GPUMEM_ERR_INVALID_ARGUMENT    fraction NaN or not in [0, 1];
 *          GPUMEM_ERR_NO_SUCH_DEVICE      `physical` out of range;
 *          GPUMEM_ERR_ALREADY_INITIALIZED a change after initialization. */
GPUMEM_API gpumem_status gpumem_set_memory_fraction(gpumem_runtime *rt, int physical,
                                                    double fraction);
/* The fraction in force for GPU `physical`; 0 when none is set. */
GPUMEM_API gpumem_status gpumem_get_memory_fraction(gpumem_runtime *rt, int physical,
                                                    double *fraction);

/* Splits GPU `physical` into n logical devices, each with its own pool and cap
 * (tf.config.set_logical_device_configuration). n = 0 restores the default of one
 * logical device. Logical devices without a limit share what the others leave of
 * the GPU's budget equally.
 * configs[0].struct_size is the size of every element (see "Struct sizes").
 * When:    before initialization (after it, only the configuration in force succeeds).
 * Returns: GPUMEM_OK;
 *          GPUMEM_ERR_INVALID_ARGUMENT    configs NULL with n > 0, n above
 *                                         GPUMEM_MAX_LOGICAL_PER_GPU, a wrong
 *                                         configs[0].struct_size, a limit of 1 to
 *                                         255 bytes (less than one granule), or a
 *                                         limit or the sum of limits above the
 *                                         GPU's total memory (the message gives
 *                                         both numbers);
 *          GPUMEM_ERR_NO_SUCH_DEVICE      `physical` out of range;
 *          GPUMEM_ERR_ALREADY_INITIALIZED a change after initialization. */
#define GPUMEM_MAX_LOGICAL_PER_GPU 64
GPUMEM_API gpumem_status gpumem_set_logical_device_configuration(
    gpumem_runtime *rt, int physical, const gpumem_logical_device_config *configs,
    size_t n);
/* The configuration set for GPU `physical` (two-call idiom); count 0 = default.
 * out[0].struct_size is the size of every element (see "Struct sizes"). */
GPUMEM_API gpumem_status gpumem_get_logical_device_configuration(
    gpumem_runtime *rt, int physical, gpumem_logical_device_config *out, size_t capacity,
    size_t *count);

/* ------------------------------------------------------------- serving -- */

/* Builds the pools. Idempotent. Greedy GPUs reserve their budgets now.
 * Returns: GPUMEM_OK; GPUMEM_ERR_OUT_OF_MEMORY or GPUMEM_ERR_BACKEND when a
 *          reservation fails (nothing stays reserved; the runtime stays
 *          unconfigured-but-configurable and a later call may retry). */
GPUMEM_API gpumem_status gpumem_initialize(gpumem_runtime *rt);

/* true once the runtime is initialized. */
GPUMEM_API gpumem_status gpumem_is_initialized(gpumem_runtime *rt, bool *initialized);

/* The backend the runtime runs on, as `auto` chose it: GPUMEM_BACKEND_SIM (the
 * memory is host memory: the program may read and write it through the pointers
 * gpumem_malloc returns) or GPUMEM_BACKEND_CUDA (device memory: for kernels and
 * cudaMemcpy only). Never AUTO or FROM_ENV.
 * When:    any time; does not initialize.
 * Threads: safe.
 * Returns: GPUMEM_OK; GPUMEM_ERR_INVALID_ARGUMENT kind NULL or a handle that is not
 *          a runtime's (see gpumem_runtime_destroy); any status of creating the
 *          default runtime. */
GPUMEM_API gpumem_status gpumem_get_backend(gpumem_runtime *rt,
                                            gpumem_backend_kind *kind);

/* Lists the logical devices (two-call idiom); initializes the runtime.
 * out[0].struct_size is the size of every element (see "Struct sizes"): a wrong
 * one fails with GPUMEM_ERR_INVALID_ARGUMENT before anything is initialized.
 * Returns: GPUMEM_OK; GPUMEM_ERR_INVALID_ARGUMENT count NULL, out NULL with a
 *          non-zero capacity, or out[0].struct_size wrong; any status of
 *          initialization (gpumem_initialize's). */
GPUMEM_API gpumem_status gpumem_list_logical_devices(gpumem_runtime *rt,
                                                     gpumem_logical_device *out,
                                                     size_t capacity, size_t *count);

/* Allocates `size` bytes on logical device `logical`, aligned to 256 bytes;
 * initializes the runtime. On the simulated backend the pointer is host memory
 * the program may read and write. Size 0: GPUMEM_OK and *ptr = NULL, as
 * cudaMalloc, counting nothing (the index is checked; nothing is initialized).
 * Memory freed by gpumem_free_async is never handed out here before the work
 * its stream queued before the free completes, and is waited for before the
 * call fails (see gpumem_malloc_async).
 * Returns: GPUMEM_OK;
 *          GPUMEM_ERR_INVALID_ARGUMENT ptr NULL;
 *          GPUMEM_ERR_NO_SUCH_DEVICE   `logical` out of range;
 *          GPUMEM_ERR_OUT_OF_MEMORY    the budget, the device or host memory is
 *                                      exhausted (the message gives the numbers);
 *          GPUMEM_ERR_BACKEND          the driver failed while growing, or while
 *                                      waiting for a stream's work (as
 *                                      gpumem_malloc_async). */
GPUMEM_API gpumem_status gpumem_malloc(gpumem_runtime *rt, int logical, size_t size,
                                       void **ptr);

/* Frees a pointer returned by gpumem_malloc or gpumem_malloc_async of the same
 * runtime, at once: the memory may be handed out again to anyone (the program
 * must have synchronized every stream that used it, as with cudaFree). NULL: no-op.
 * Returns: GPUMEM_OK; GPUMEM_ERR_INVALID_POINTER for a pointer never returned, an
 *          interior pointer, another runtime's pointer or a double free (one after
 *          gpumem_free_async too; nothing changes);
 *          GPUMEM_ERR_BACKEND, GPUMEM_ERR_OUT_OF_MEMORY for a block recorded on
 *          other streams (gpumem_record_stream) whose events could not be made or
 *          recorded (the driver failed; its memory or the host's ran out):
 *          nothing changes, the block is still the caller's (free it again). */
GPUMEM_API gpumem_status gpumem_free(gpumem_runtime *rt, void *ptr);

/* Stream-ordered allocation, with cudaMallocAsync's and cudaFreeAsync's meaning.
 * `stream` is the program's CUDA stream handle, opaque to gpumem: a CUstream, a
 * cudaStream_t (PyTorch's torch.cuda.Stream.cuda_stream) or CuPy's stream.ptr are
 * the same thing; NULL is the legacy default stream. It must belong to the
 * primary context of the logical device's GPU (the context the CUDA runtime,
 * PyTorch and CuPy use).
 *
 * The rule: a block freed by gpumem_free_async on stream S becomes S's free
 * memory at once: a gpumem_malloc_async on S may get it, or any part of it
 * joined with S's other free memory, at once, since S runs the work queued
 * before the free first. Nobody else gets it until that work has completed:
 * other streams and gpumem_malloc get it once an event recorded on S (one stands
 * for everything S freed before it) says so. No driver call is made on that
 * path: the event is recorded only when memory must pass to another stream (as
 * PyTorch's allocator keeps a stream's freed blocks for that stream).
 * When memory is short: a request that the pool cannot serve from the free memory
 * it may take first looks at the other streams' events without waiting (recording
 * one where none is; memory whose work has completed is anyone's from then), then
 * grows the pool as usual, within its budget; when the budget or the device does
 * not allow that, it waits for every stream's work (blocking the calling thread,
 * with that logical device's pool locked) and tries again, and only then fails with
 * GPUMEM_ERR_OUT_OF_MEMORY. So a stream-ordered free never causes an out of
 * memory that waiting would avoid, and never makes a thread wait while the
 * budget has room (PyTorch's allocator and cudaMallocAsync take new memory
 * then too, rather than stall the host behind another stream's work).
 * gpumem_malloc waits the same way; gpumem_release_unused waits for every
 * stream's work, and gpumem_runtime_destroy too, before giving memory back. A
 * stream-ordered free must not be waited on from work queued on a stream (a host
 * function, or a callback, that calls gpumem): it may wait for itself. A stream
 * that freed memory here must stay alive (not destroyed) until that memory was
 * handed over (gpumem_release_unused hands over every stream's), since its event
 * is recorded on it then, not at the free; a record that fails leaves the memory
 * the stream's and the call that waits for it fails with GPUMEM_ERR_BACKEND.
 * Counting: a freed block leaves current_bytes and counts in num_frees at the free
 * (as PyTorch's allocated bytes drop at free); it is free memory from then
 * (largest_free_block counts it: it serves its stream without growing). Up to 31
 * streams hold memory of a pool at once; a 32nd stream's first free waits for the
 * work of the stream that used the pool least recently. Simulated GPUs: work is
 * synchronous (every event is complete at once), so these are gpumem_malloc and
 * gpumem_free, `stream` unused. The plain gpumem_malloc/gpumem_free are not ordered by
 * any stream: memory gpumem_free gives back may be handed out at once, to any stream.
 * Threads: safe, as gpumem_malloc and gpumem_free.
 * Fork: as every call (see the top): refused in a forked child of the process
 * that initialized the runtime; the child's gpumem_runtime_destroy of it makes no
 * driver call (the events are the parent's). */

/* Allocates `size` bytes on logical device `logical` for use on `stream`, aligned
 * to 256 bytes; initializes the runtime. Size 0: GPUMEM_OK and *ptr = NULL,
 * counting nothing (the index is checked; nothing is initialized).
 * When:    any time.
 * Returns: GPUMEM_OK;
 *          GPUMEM_ERR_INVALID_ARGUMENT ptr NULL;
 *          GPUMEM_ERR_NO_SUCH_DEVICE   `logical` out of range;
 *          GPUMEM_ERR_OUT_OF_MEMORY    as gpumem_malloc, after waiting for every
 *                                      stream's work (see the rule above);
 *          GPUMEM_ERR_BACKEND          the driver failed while growing, or while
 *                                      waiting for a stream's work (its memory
 *                                      stays its own, never handed out). */
GPUMEM_API gpumem_status gpumem_malloc_async(gpumem_runtime *rt, int logical, size_t size,
                                             void *stream, void **ptr);

/* Frees a pointer returned by gpumem_malloc or gpumem_malloc_async of the same
 * runtime (from any stream) once the work queued on `stream` so far has
 * completed: see the rule above. The program must have ordered every other
 * stream's use of the block before that work (with events, as with
 * cudaFreeAsync). NULL: no-op.
 * When:    any time.
 * No driver call, but on a stream's first free into the pool when 31 other
 * streams hold memory there (see the rule above).
 * Returns: GPUMEM_OK;
 *          GPUMEM_ERR_INVALID_POINTER as gpumem_free (a double free, whichever
 *                                     the stream); nothing changes;
 *          GPUMEM_ERR_BACKEND         a wait for another stream's work, to make
 *                                     room for this stream, failed, or a block
 *                                     recorded on other streams could not have
 *                                     its events made or recorded (as
 *                                     gpumem_free): nothing changes (the block is
 *                                     still the caller's, and may be freed
 *                                     again);
 *          GPUMEM_ERR_OUT_OF_MEMORY   host memory for this stream's bookkeeping
 *                                     (its first free), or the memory for an
 *                                     event (the driver's or the host's, for a
 *                                     wait or a recorded block): nothing
 *                                     changes;
 *          GPUMEM_ERR_UNSUPPORTED     a stream's first free while every one of
 *                                     the 31 other streams' slots holds memory
 *                                     and a CUDA graph capture is under way
 *                                     (gpumem_stream_capture), when no stream
 *                                     may be waited for: nothing changes. */
GPUMEM_API gpumem_status gpumem_free_async(gpumem_runtime *rt, void *ptr, void *stream);

/* The live block `ptr` (returned by gpumem_malloc or gpumem_malloc_async of this
 * runtime) is used on `stream` too, besides the stream it will be freed on
 * (PyTorch's Tensor.record_stream, cudaStream_t or CuPy's stream.ptr as void *):
 * its free, stream-ordered or plain, then hands it out to nobody before the work
 * queued on every stream it was recorded on before that free has completed. At
 * the free, one event is recorded on each of those streams and on the free's own
 * (none for a stream that is the free's own), and the block stays allocated
 * (current_bytes, snapshots) until they have all completed; a later allocation
 * that finds no fit, gpumem_release_unused and gpumem_runtime_destroy look at
 * them (waiting, as for gpumem_free_async's blocks, only when memory is short
 * or being given back). Recording a stream twice changes nothing; a block never
 * recorded costs nothing more. On simulated GPUs, whose streams are synchronous,
 * nothing is recorded. ptr NULL: GPUMEM_OK, nothing done.
 * A stream recorded must stay alive until the block's free (its event is
 * recorded on it then). A free that cannot record an event fails, the block
 * live and its records kept (free it again).
 * When:    any time.
 * Threads: safe.
 * Returns: GPUMEM_OK;
 *          GPUMEM_ERR_INVALID_POINTER not the start of a live allocation of this
 *                                     runtime, or freed already (waiting for its
 *                                     streams);
 *          GPUMEM_ERR_OUT_OF_MEMORY   host memory for the record: nothing changes. */
GPUMEM_API gpumem_status gpumem_record_stream(gpumem_runtime *rt, void *ptr,
                                              void *stream);

/* A CUDA stream capture (a CUDA graph being captured) begins (`begin` true) or
 * ends (false) in this process. While one is under way, CUDA's global capture
 * mode refuses event queries and waits from every thread (the capture fails), so
 * gpumem makes none: an allocation that finds no fit grows the pool without
 * looking at other streams' frees, and when it cannot grow fails with
 * GPUMEM_ERR_OUT_OF_MEMORY instead of waiting; gpumem_release_unused gives back
 * only what is anyone's; a free of a block recorded on other streams
 * (gpumem_record_stream) records its events at the first look after the last
 * capture ends. Counted: each capture calls both; process-wide (the driver's rule
 * is), across runtimes; a forked child starts with none. gpumem.torch's
 * graph-pool hooks call it (cpp/).
 * When:    any time.
 * Threads: safe.
 * Returns: GPUMEM_OK; GPUMEM_ERR_INVALID_ARGUMENT `begin` false with no capture
 *          under way. */
GPUMEM_API gpumem_status gpumem_stream_capture(bool begin);

/* A snapshot of logical device `logical`'s pool; initializes the runtime. The
 * caller sets out->struct_size (see "Struct sizes").
 * Returns: GPUMEM_OK; GPUMEM_ERR_INVALID_ARGUMENT out NULL or out->struct_size
 *          wrong (checked before anything is initialized);
 *          GPUMEM_ERR_NO_SUCH_DEVICE `logical` out of range; any status of
 *          initialization (gpumem_initialize's). */
GPUMEM_API gpumem_status gpumem_get_memory_info(gpumem_runtime *rt, int logical,
                                                gpumem_memory_info *out);

/* Sets peak_bytes to current_bytes, peak_reserved_bytes to reserved_bytes,
 * peak_live_blocks to live_blocks, peak_segments to segments, the two peaks of
 * the inactive split figures to the figures and the counters
 * num_allocs, num_frees and num_ooms to 0 (the totals are never reset; logical -1:
 * every logical device). Before initialization there is nothing to reset: GPUMEM_OK.
 * Returns: GPUMEM_OK; GPUMEM_ERR_NO_SUCH_DEVICE `logical` out of range. */
GPUMEM_API gpumem_status gpumem_reset_memory_stats(gpumem_runtime *rt, int logical);

/* Waits for the work of every stream that freed memory here with
 * gpumem_free_async (see gpumem_malloc_async), then gives every wholly free region of
 * logical device `logical` (-1: every logical device) back to the GPU, greedy pools
 * included; a pool takes memory again on demand, up to its budget. A growing pool whose
 * memory is mapped into an address range (CUDA's virtual memory management) also gives
 * back the free memory inside the regions that stay, in whole extents (a run of
 * 2 MiB granules mapped by one driver call, at most eight to a region), and maps
 * them again when an allocation lands on them. A greedy pool is one region:
 * it goes back only when nothing in it is live, and the next allocation that does
 * not fit takes the whole budget again; when the GPU no longer has that much free
 * (another runtime or process took part of it), the pool grows as a growing pool
 * does, by what each request lacks, rather than fail it, and tries the whole
 * budget again at each later growth (turn growth on to give memory back in
 * parts). *released (may be NULL) receives the bytes given back, also when the
 * call fails with GPUMEM_ERR_BACKEND (the one out-parameter written on a failure).
 * Before initialization nothing is reserved: GPUMEM_OK with 0. A region the driver
 * refuses to take back stays in reserved_bytes and keeps counting against the
 * budget (the driver still holds it); the log names it, and the call goes on with
 * the other regions and then returns GPUMEM_ERR_BACKEND. A failed wait leaves that
 * stream's memory its own (not given back) and returns GPUMEM_ERR_BACKEND too.
 * A growing pool that makes no allocation and no free for
 * GPUMEM_GROWTH_IDLE_RELEASE_MS (default 60 s; 0: never) does the same on its own,
 * from a thread of the runtime, except that it waits for no stream: what a stream
 * freed goes back then only where a query finds its work done.
 * Returns: GPUMEM_OK; GPUMEM_ERR_NO_SUCH_DEVICE; GPUMEM_ERR_BACKEND. */
GPUMEM_API gpumem_status gpumem_release_unused(gpumem_runtime *rt, int logical,
                                               uint64_t *released);

/* ------------------------------------------------------- driver calls -- */

/* What one entry point of the CUDA driver cost on one GPU (or on all, summed):
 * a driver call takes about a microsecond, a mapping tens of them (an H200 mapped
 * 2 MiB granules at about 44 us each), so the calls a workload makes are a price
 * of its own, beside the time gpumem spends. */
typedef struct gpumem_driver_call {
    uint32_t struct_size; /* set by the caller: see "Struct sizes" above */
    char name[48];        /* the driver's symbol: "cuMemMap", "cuCtxPushCurrent_v2" */
    uint64_t calls;       /* calls made, failed ones included */
    uint64_t ns;          /* nanoseconds spent inside them (CLOCK_MONOTONIC) */
    uint64_t bytes;       /* the memory calls: the sizes they were given (memory
                             taken, mapped, opened, unmapped, given back, or
                             addresses reserved and freed); 0 for the others */
} gpumem_driver_call;

/* The CUDA driver calls rt made on physical GPU `physical` (-1: every GPU,
 * summed) since rt was created: one entry per entry point gpumem calls once the
 * driver is open (contexts, memory info, plain allocations, address ranges,
 * mappings, events), always all of them, in a fixed order and zeros included, so
 * that *count is the same for every call (two-call idiom: out NULL asks for
 * it). A hidden GPU has an index and counts too (nothing, unless it was used).
 * On CUDA, every call gpumem makes is counted and timed around the call; on a
 * simulated GPU, each of its operations counts the calls the CUDA backend makes
 * for the same operation (its context's push and pop included), so that a
 * program tested without a GPU sees what a GPU would be asked; there `ns` is
 * the simulation's own time, booked under the call that does the work (cuMemMap
 * for a mapping). Not counted: the calls that open the driver (cuInit and the
 * device queries, once, at gpumem_runtime_create) and the error texts of a
 * failed call (cuGetErrorName, cuGetErrorString). Events (stream-ordered frees)
 * exist on CUDA only: a simulated GPU's streams are synchronous.
 * The counters only grow, and nothing resets them (gpumem_reset_memory_stats
 * works per logical device, and several logical devices share a GPU's
 * driver): take the difference of two readings. Counting costs two clock
 * readings and three atomic additions per driver call, and nothing where gpumem
 * makes none (a pool's steady path).
 * When:    any time; does not initialize (before initialization, nothing has
 *          been counted).
 * Threads: safe, also while other threads allocate; each number is read
 *          atomically, not the three of an entry together (a call in flight may
 *          be in `calls` and not yet in `ns`).
 * Returns: GPUMEM_OK;
 *          GPUMEM_ERR_INVALID_ARGUMENT count NULL, out NULL with a non-zero
 *                                      capacity, or out[0].struct_size wrong;
 *          GPUMEM_ERR_NO_SUCH_DEVICE   `physical` out of range (and not -1). */
GPUMEM_API gpumem_status gpumem_list_driver_calls(gpumem_runtime *rt, int physical,
                                                  gpumem_driver_call *out,
                                                  size_t capacity, size_t *count);

/* -------------------------------------------------------------- errors -- */

/* A sentence for a status ("out of memory"); "unknown gpumem status" otherwise. */
GPUMEM_API const char *gpumem_status_string(gpumem_status s);
/* The enumerator's name ("GPUMEM_ERR_OUT_OF_MEMORY"); "GPUMEM_ERR_UNKNOWN" otherwise. */
GPUMEM_API const char *gpumem_status_name(gpumem_status s);
/* The calling thread's last failure message; "" if none. A success does not clear
 * it: check the status first. Valid until the thread's next gpumem call. */
GPUMEM_API const char *gpumem_last_error(void);

/* ----------------------------------------------------- framework hooks -- */

/* Entry points for programs that take a foreign allocator: PyTorch's pluggable
 * allocator, and C inference engines that would otherwise call cudaMalloc. They
 * are thin layers over gpumem_malloc(), gpumem_free() and their stream-ordered
 * twins (lib/hooks.c) and add no state of their own. Python's CuPy hook is
 * gpumem.cupy_allocator (pure Python, over gpumem_malloc). */

/* ssize_t is POSIX, not C11; PyTorch's documented signatures use it. */
#if defined(_WIN32)
typedef ptrdiff_t gpumem_ssize;
#else
typedef ssize_t gpumem_ssize; /* <sys/types.h>, included at the top */
#endif

/* PyTorch's pluggable-allocator pair, with the signatures that
 * torch.cuda.memory.CUDAPluggableAllocator(path, alloc_fn_name, free_fn_name)
 * loads from a shared library (PyTorch docs, "Using custom memory allocators for
 * CUDA" in notes/cuda):
 *     void *alloc(ssize_t size, int device, cudaStream_t stream);
 *     void free(void *ptr, ssize_t size, int device, cudaStream_t stream);
 * cudaStream_t is a pointer type, declared here as void *.
 *
 *     alloc = torch.cuda.memory.CUDAPluggableAllocator(
 *         "libgpumem.so", "gpumem_torch_malloc", "gpumem_torch_free")
 *     torch.cuda.memory.change_current_allocator(alloc)
 *
 * Both use the process-wide default runtime (configured from the environment, or
 * by gpumem calls made before the first allocation, e.g. through the Python
 * package). PyTorch's `device` is its CUDA device index, which is the driver's
 * ordinal and so gpumem's PHYSICAL index: the memory comes from the first
 * logical device on that GPU (/device:GPU:<device> when no GPU before it is
 * split or hidden). A hidden GPU has no memory to give (NO_SUCH_DEVICE).
 *
 * gpumem_torch_malloc: `size` bytes on GPU `device` for use on `stream`, 256-byte
 * aligned (gpumem_malloc_async); initializes the default runtime on first use. Returns
 * NULL for size 0 (nothing to allocate, no error), and NULL on failure with the reason in
 * gpumem_last_error() (the statuses of gpumem_malloc(); a negative size is
 * GPUMEM_ERR_INVALID_ARGUMENT; GPUMEM_ERR_UNSUPPORTED when GPUMEM_BACKEND=auto
 * found no usable CUDA driver and fell back to simulated GPUs, whose memory is
 * host memory). PyTorch does not check for NULL, so every failure is also written
 * to standard error ("gpumem: <message>"); give the logical device a budget that
 * fits the model.
 * gpumem_torch_free: frees `ptr` (NULL: no-op) on `stream`, the stream PyTorch
 * passes, which is the one the block was allocated on (gpumem_free_async): the
 * block is handed out again at once on that stream, and to another only once the
 * work queued there before the free has completed (the rule at
 * gpumem_malloc_async). A tensor used on another stream too is ordered by
 * Tensor.record_stream when PyTorch was given gpumem_torch_record_stream (below;
 * gpumem.torch.use() gives it where PyTorch takes one), and must otherwise be
 * synchronized with its own stream before it is freed. `size` and
 * `device` are not needed (gpumem finds the pool from the address). A foreign
 * pointer or a double free changes nothing and leaves
 * GPUMEM_ERR_INVALID_POINTER's message in gpumem_last_error(); a driver failure
 * recording the free's event leaves the block allocated (never handed out
 * unsafely) and its message there, also on standard error.
 * Threads: safe from any thread (as gpumem_malloc/gpumem_free). */
GPUMEM_API void *gpumem_torch_malloc(gpumem_ssize size, int device, void *stream);
/* gpumem_torch_malloc without printing, for a shim that reports errors itself (a
 * C++ allocator that throws): the status, *ptr on success (NULL for size 0), and
 * the message in gpumem_last_error() on failure. Size 0: GPUMEM_OK and NULL, as
 * gpumem_malloc. *ptr is not written on failure.
 * When:    any time.
 * Threads: safe.
 * Returns: GPUMEM_OK; GPUMEM_ERR_INVALID_ARGUMENT ptr NULL or size negative;
 *          the statuses of gpumem_cuda_device_logical and gpumem_malloc_async. */
GPUMEM_API gpumem_status gpumem_torch_alloc(gpumem_ssize size, int device, void *stream,
                                            void **ptr);
/* The logical device of rt (NULL: the default runtime) that serves a framework's
 * CUDA device `cuda_device`: the CUDA ordinal (the driver's numbering, after
 * CUDA_VISIBLE_DEVICES), which is gpumem's physical index, is served by the first
 * logical device on that GPU. gpumem_torch_malloc and the Python package's
 * cupy_allocator use it; so may other frameworks' hooks. Initializes rt.
 * When:    any time.
 * Threads: safe.
 * Returns: GPUMEM_OK and *logical;
 *          GPUMEM_ERR_INVALID_ARGUMENT logical NULL, or not a runtime's handle;
 *          GPUMEM_ERR_NO_SUCH_DEVICE   no such GPU, or it is hidden;
 *          GPUMEM_ERR_UNSUPPORTED      GPUMEM_BACKEND=auto found no usable CUDA driver
 *                                      and fell back to simulated GPUs, whose memory
 *                                      is host memory (a simulated GPU chosen by
 *                                      name, GPUMEM_BACKEND=sim, is served);
 *          any status of initialization. */
GPUMEM_API gpumem_status gpumem_cuda_device_logical(gpumem_runtime *rt, int cuda_device,
                                                    int *logical);
GPUMEM_API void gpumem_torch_free(void *ptr, gpumem_ssize size, int device, void *stream);
/* PyTorch's record-stream hook, `void (void *ptr, cudaStream_t stream)`, which
 * its pluggable allocator calls for Tensor.record_stream once it was given the
 * function's address (set_record_stream_fn on the object behind
 * CUDAPluggableAllocator(...).allocator(), in the PyTorch versions that have
 * it): gpumem_record_stream on the default runtime. A pointer that is not
 * gpumem's changes nothing (its message stays in gpumem_last_error()); any
 * other failure is also written to standard error, since PyTorch cannot hear it.
 * Threads: safe. */
GPUMEM_API void gpumem_torch_record_stream(void *ptr, void *stream);
/* PyTorch's reset hook, `void (void)`, which its pluggable allocator calls for
 * torch.cuda.empty_cache() once it was given the function's address
 * (set_reset_fn): gpumem_release_unused of every logical device of the default
 * runtime, when it is initialized (before, there is nothing to give back, and
 * nothing is initialized). A failure (a stream's wait) is written to standard
 * error, since PyTorch cannot hear it. Threads: safe. */
GPUMEM_API void gpumem_torch_empty_cache(void);

/* An allocator a C engine can hold instead of calling cudaMalloc/cudaFree: the
 * struct is its own context (after ONNX Runtime's OrtAllocator), so it may be
 * copied freely and passed by pointer to its functions:
 *
 *     gpumem_allocator a = GPUMEM_STRUCT_INIT(gpumem_allocator);
 *     if (gpumem_get_allocator(NULL, 0, &a) != GPUMEM_OK) ...;
 *     void *p;
 *     if (a.allocate(&a, 1 << 20, &p) != GPUMEM_OK) ... gpumem_last_error() ...;
 *     a.deallocate(&a, p);
 *     if (a.struct_size >= GPUMEM_ALLOCATOR_SIZE_ASYNC) {   (after gpumem 0.2)
 *         a.allocate_async(&a, 1 << 20, stream, &p);
 *         a.deallocate_async(&a, p, stream);
 *     }
 *
 * Plain fields and function pointers only (no unions, varargs or bitfields), so
 * ctypes and other FFIs can declare it. Fields are only appended: a caller that
 * wants the stream-ordered entries sets struct_size to sizeof(gpumem_allocator)
 * (GPUMEM_STRUCT_INIT) before gpumem_get_allocator, which then fills the whole
 * struct; any other struct_size (0, unset, a size this library does not know)
 * gets the first version's fields only, up to `deallocate`
 * (GPUMEM_ALLOCATOR_SIZE_0_2 bytes), so that a program written before the
 * fields existed, which leaves struct_size unset, is never written past. Either
 * way struct_size is set to the bytes written: check it before using a later
 * field. */
typedef struct gpumem_allocator gpumem_allocator;

/* Allocates `size` bytes (> 0) on self->logical, 256-byte aligned, into *ptr:
 * gpumem_malloc(self->runtime, self->logical, size, ptr), with its statuses;
 * GPUMEM_ERR_INVALID_ARGUMENT when self is NULL. */
typedef gpumem_status (*gpumem_allocate_fn)(const gpumem_allocator *self, size_t size,
                                            void **ptr);
/* Frees a pointer from `allocate` (NULL: no-op): gpumem_free(self->runtime, ptr),
 * with its statuses; GPUMEM_ERR_INVALID_ARGUMENT when self is NULL. */
typedef gpumem_status (*gpumem_deallocate_fn)(const gpumem_allocator *self, void *ptr);
/* Stream-ordered: gpumem_malloc_async(self->runtime, self->logical, size, stream,
 * ptr) and gpumem_free_async(self->runtime, ptr, stream), with their statuses and
 * rule; GPUMEM_ERR_INVALID_ARGUMENT when self is NULL. */
typedef gpumem_status (*gpumem_allocate_async_fn)(const gpumem_allocator *self,
                                                  size_t size, void *stream, void **ptr);
typedef gpumem_status (*gpumem_deallocate_async_fn)(const gpumem_allocator *self,
                                                    void *ptr, void *stream);

struct gpumem_allocator {
    uint32_t struct_size;            /* the caller's size in; the bytes written out */
    int32_t logical;                 /* the logical device: /device:GPU:<logical> */
    gpumem_runtime *runtime;         /* the runtime allocated from; NULL = the default */
    gpumem_allocate_fn allocate;     /* never NULL once filled */
    gpumem_deallocate_fn deallocate; /* never NULL once filled */
    /* after gpumem 0.2: written when struct_size >= GPUMEM_ALLOCATOR_SIZE_ASYNC */
    gpumem_allocate_async_fn allocate_async;     /* never NULL once written */
    gpumem_deallocate_async_fn deallocate_async; /* never NULL once written */
};

/* The struct_size of the first version's gpumem_allocator (up to `deallocate`), and
 * the smallest one that holds the stream-ordered entries. */
#define GPUMEM_ALLOCATOR_SIZE_0_2                                                        \
    (offsetof(gpumem_allocator, deallocate) + sizeof(void *))
#define GPUMEM_ALLOCATOR_SIZE_ASYNC                                                      \
    (offsetof(gpumem_allocator, deallocate_async) + sizeof(void *))

/* Fills *out with an allocator for logical device `logical` of `rt` (NULL: the
 * default runtime): the whole struct when out->struct_size is
 * sizeof(gpumem_allocator), else the first version's fields (see gpumem_allocator
 * above); struct_size is set to the bytes written. Does not initialize the runtime:
 * before initialization `logical` is checked against the logical devices the current
 * configuration would build. The allocator holds the index, not a device: it allocates on
 * whatever /device:GPU:<logical> is once the runtime initializes, so a later
 * configuration change can put it on another GPU, or make it invalid (`allocate`
 * then fails with GPUMEM_ERR_NO_SUCH_DEVICE). The allocator stays valid as long as
 * the runtime does.
 * When:    any time.
 * Threads: safe; the allocator's functions are safe from any thread.
 * Returns: GPUMEM_OK;
 *          GPUMEM_ERR_INVALID_ARGUMENT out NULL, or a handle that is not a
 *                                      runtime's (see gpumem_runtime_destroy);
 *          GPUMEM_ERR_NO_SUCH_DEVICE   `logical` out of range;
 *          GPUMEM_ERR_OUT_OF_MEMORY    host memory exhausted;
 *          any status of creating the default runtime. */
GPUMEM_API gpumem_status gpumem_get_allocator(gpumem_runtime *rt, int logical,
                                              gpumem_allocator *out);

/* ----------------------------------------------------------- snapshots -- */

/* Labels the allocations the calling thread makes from now on (every logical
 * device, every runtime) with `tag`, shown in snapshots and in out-of-memory
 * messages; NULL or "" removes the label. The text is copied (interned once per
 * process and kept until the process ends), so the caller's string may go.
 * Threads: per thread. When: any time.
 * Returns: GPUMEM_OK; GPUMEM_ERR_INVALID_ARGUMENT a tag longer than 127 bytes;
 *          GPUMEM_ERR_OUT_OF_MEMORY the process's 4096 distinct tags are taken
 *          (or host memory ran out): reuse tags, do not make one per allocation. */
GPUMEM_API gpumem_status gpumem_set_tag(const char *tag);
/* The calling thread's tag (the interned copy), or NULL. */
GPUMEM_API const char *gpumem_get_tag(void);

/* A snapshot of logical device `logical` (-1: every logical device) as JSON in the
 * structure of PyTorch's torch.cuda.memory._snapshot(), which its memory viewer
 * opens: every segment (a region, or a run of regions mapped side by side) with
 * every chunk in address order, free ones included, with requested size, state,
 * sequence number, stream and tag; docs/snapshot.md has the format. Initializes
 * the runtime. Each pool is copied under its lock and formatted after.
 * Two-call idiom, with a snapshot that may change between the calls: buf NULL
 * (capacity 0) sets *length to the bytes the text needs now, its NUL included;
 * with a buffer, a new snapshot is taken, and when it is longer than capacity
 * nothing is written, *length is the bytes it needs now, and the call fails with
 * GPUMEM_ERR_INVALID_ARGUMENT: give room (a tenth more), or call again.
 * Threads: safe, also while other threads allocate and free.
 * Returns: GPUMEM_OK; GPUMEM_ERR_INVALID_ARGUMENT length NULL, buf NULL with a
 *          capacity, a buffer too short (above); GPUMEM_ERR_NO_SUCH_DEVICE;
 *          GPUMEM_ERR_OUT_OF_MEMORY host memory for the copy or the text; any
 *          status of initialization (gpumem_initialize's). */
GPUMEM_API gpumem_status gpumem_snapshot_json(gpumem_runtime *rt, int logical, char *buf,
                                              size_t capacity, size_t *length);
/* gpumem_snapshot_json into the file at `path` (created or replaced), whole or
 * not at all: written to a new file in the same folder (mode 0666 less the
 * umask), then renamed onto `path`, so that a reader never sees half of it. A
 * symbolic link at `path` itself is not followed: it is refused, as is anything
 * else that is not a regular file there, and left as it is (folders on the way
 * are the caller's: links among them are followed). The JSON is valid UTF-8
 * whatever bytes the tags hold: each byte outside well-formed UTF-8 is written
 * as \ufffd (U+FFFD).
 * Returns: as gpumem_snapshot_json; GPUMEM_ERR_INVALID_ARGUMENT path NULL or empty,
 *          a link or not a regular file at `path`, or the file cannot be written
 *          (the message quotes the system's reason). */
GPUMEM_API gpumem_status gpumem_snapshot_file(gpumem_runtime *rt, int logical,
                                              const char *path);

/* The most events one logical device's history holds (64 bytes each). */
#define GPUMEM_RECORD_HISTORY_MAX ((uint64_t)1 << 28)

/* The event history: each logical device of rt keeps its last `max_entries`
 * events (an allocation, a free asked for and a free completed, a region taken
 * and given back, an out of memory; each with its time, address, size, stream
 * and tag), for snapshots, which show them as PyTorch's device_traces, and for
 * gpumem_history_trace. 0 turns it off. Off by default; GPUMEM_RECORD_HISTORY=N
 * sets the size a runtime starts with. Calling again re-sizes each device's
 * history and keeps its newest events (as many as the new size holds); 0 drops
 * them. Before initialization the size is kept for it (nothing is made yet).
 * Cost: off, nothing measurable; on, one event (64 bytes) written per
 * allocation, two per free, under the pool's lock the call holds anyway
 * (docs/bench.md has the figures).
 * Threads: safe, also while other threads allocate. When: any time.
 * Returns: GPUMEM_OK; GPUMEM_ERR_INVALID_ARGUMENT max_entries past
 *          GPUMEM_RECORD_HISTORY_MAX; GPUMEM_ERR_OUT_OF_MEMORY host memory for
 *          the rings (the devices done before keep their new size). */
GPUMEM_API gpumem_status gpumem_record_history(gpumem_runtime *rt, size_t max_entries);

/* The history of logical device `logical` (-1: every logical device, merged by
 * time) in the allocation-trace format of bench/ (DESIGN.md; `a ID SIZE`, `f ID`,
 * comment lines starting with '#'), which `gpumem-replay TRACE` replays: a
 * program's real run as a bug report that reproduces. An allocation is `a
 * d<logical>.<seq> <bytes asked for>`; a free, plain or stream-ordered, is `f`
 * when it is asked for. The trace holds what the history holds: a free whose
 * allocation came before the oldest event held is left out (the allocation is
 * then not in the trace either), and a comment line at the top says how many
 * events were dropped. Regions and out of memory are comments. Initializes the
 * runtime. Two-call idiom as gpumem_snapshot_json (the history may grow between
 * the calls: give room, or call again).
 * Returns: GPUMEM_OK (an empty trace, comments only, when the history is off or
 *          empty); as gpumem_snapshot_json otherwise. */
GPUMEM_API gpumem_status gpumem_history_trace(gpumem_runtime *rt, int logical, char *buf,
                                              size_t capacity, size_t *length);
/* gpumem_history_trace into the file at `path` (created or replaced), written as
 * gpumem_snapshot_file writes (whole or not at all, never through a link).
 * Returns: as gpumem_snapshot_file. */
GPUMEM_API gpumem_status gpumem_history_trace_file(gpumem_runtime *rt, int logical,
                                                   const char *path);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_H */
