/* The environment variables gpumem knows, one descriptor each: options.c parses
 * from this table, README's variable table is checked against its help texts
 * (test_options), and the tests clear the variables it names. No includes and no
 * types of the library: the public-API tests, which know only gpumem.h, take the
 * names from here too. Adding a variable is one X(...) line, a field of struct
 * options and a parser in options.c. */
#ifndef GPUMEM_OPTION_VARS_H
#define GPUMEM_OPTION_VARS_H

/* Who reads a variable. Only GPUMEM_READ_BY_LIBRARY ones are parsed into struct
 * options; the others are listed so that README's table and the tests that clear
 * the environment see every variable that changes what gpumem does. */
enum gpumem_option_reader {
    GPUMEM_READ_BY_LIBRARY, /* options.c, when a runtime is created */
    GPUMEM_READ_BY_PYTHON,  /* the Python package, before it loads the library */
    GPUMEM_READ_BY_DRIVER,  /* the CUDA driver; gpumem only quotes it in messages */
};

/* X(name, alias, reader, parse, field, help), in the order options.c reads them
 * (when several are bad, the first one's error is reported):
 *   name    the variable
 *   alias   TensorFlow's spelling, read (and checked) before name so that name
 *           wins when both are set; NULL when there is none
 *   reader  an enum gpumem_option_reader
 *   parse   options.c's parser of the value (NULL unless read by the library)
 *   field   OPTION_FIELD(member of struct options the value lands in), or
 *           OPTION_NO_FIELD
 *   help    the variable's row in README's table (markdown), whole */
/* clang-format off */
#define GPUMEM_OPTION_VARS(X)                                                            \
    X("GPUMEM_BACKEND", NULL, GPUMEM_READ_BY_LIBRARY, parse_backend,                     \
      OPTION_FIELD(backend),                                                             \
      "`auto` (default: CUDA if a device is found, else simulated), `cuda`, `sim`")      \
    X("GPUMEM_SIM_DEVICES", NULL, GPUMEM_READ_BY_LIBRARY, parse_sim_devices,             \
      OPTION_FIELD(sim_devices),                                                         \
      "simulated GPUs, comma-separated `SIZE`, `MODEL:SIZE` or `MODEL:SIZE:CC`, e.g. "   \
      "`12GiB,24GiB` or `TITAN X:12GiB:6.1,A100:40GiB:8.0`; sizes in B, KiB, MiB, GiB, " \
      "TiB, from 256 B to 64 TiB; compute capability 8.0 when not given; default one "   \
      "16 GiB GPU; empty = no GPU")                                                      \
    X("GPUMEM_SIM_MACHINE", NULL, GPUMEM_READ_BY_LIBRARY, parse_sim_machine,             \
      OPTION_FIELD(sim_machine),                                                         \
      "`NAME` (1 to 40 of `A-Z a-z 0-9 _ -`): processes that set the same name share "   \
      "their simulated GPUs as processes share a real card: one free-memory count per "  \
      "GPU across them (a process's memory stops counting when it ends, however it "     \
      "ends), the same UUIDs, and `gpumem-smi` run with the same name shows them. They " \
      "must set the same `GPUMEM_SIM_DEVICES` (another list is refused). Files "         \
      "`/dev/shm/gpumem-sim-NAME*`. Unset (default): each process has its own GPUs")    \
    X("GPUMEM_FORCE_ALLOW_GROWTH", "TF_FORCE_GPU_ALLOW_GROWTH", GPUMEM_READ_BY_LIBRARY,  \
      parse_force_growth, OPTION_FIELD(force_growth),                                    \
      "`true`/`false`: every GPU's growth. As in TensorFlow it overrides an explicit "   \
      "`gpumem_set_memory_growth` at initialization, with a warning naming the GPU (in " \
      "the log at WARNING; on standard error for the default runtime when its log does " \
      "not take it; `gpumem_get_memory_growth` still returns what was set). Also "       \
      "`1`/`0`, `yes`/`no`, `on`/`off`; anything else is refused, where TensorFlow "     \
      "takes only `true`/`false` and ignores the rest")                                  \
    X("GPUMEM_MEMORY_FRACTION", NULL, GPUMEM_READ_BY_LIBRARY, parse_fraction,            \
      OPTION_FIELD(memory_fraction),                                                     \
      "default fraction of total memory for every GPU, in [0, 1]")                       \
    X("GPUMEM_MIN_SYSTEM_MEMORY_MB", "TF_DEVICE_MIN_SYS_MEMORY_IN_MB",                   \
      GPUMEM_READ_BY_LIBRARY, parse_min_system_memory,                                   \
      OPTION_FIELD(min_system_memory_bytes),                                             \
      "headroom in MiB left to the driver by the default budget")                        \
    X("GPUMEM_CUDA_VMM", NULL, GPUMEM_READ_BY_LIBRARY, parse_off_switch,                 \
      OPTION_FIELD(cuda_no_vmm),                                                         \
      "`true` (default) / `false`: whether growing pools on CUDA use virtual memory "    \
      "management where the driver has it; `false` keeps growth on plain "              \
      "`cuMemAlloc_v2` regions (for peer access or IPC handles on growth memory)")       \
    X("GPUMEM_LOG_LEVEL", NULL, GPUMEM_READ_BY_LIBRARY, parse_log_level,                 \
      OPTION_FIELD(log_level),                                                           \
      "`off` (default), `error`, `warning`, `info`, `debug`: a runtime given no log "    \
      "callback (the default runtime, so Python's and the framework hooks') writes its " \
      "log at that level and above to standard error, one line each (`gpumem: INFO: "    \
      "/device:GPU:0 on GPU:0: budget ...`). `info` says why `auto` fell back to "       \
      "simulated GPUs (two warnings are printed even when it is `off`: growth forced "   \
      "by a variable, and a GPU whose driver fails `cuInit`); `debug` shows every "      \
      "region taken and given back. A callback set in `gpumem_options` takes the log "   \
      "instead, at its own `log_level`")                                                 \
    X("GPUMEM_CUDA_LIBRARY", NULL, GPUMEM_READ_BY_LIBRARY, parse_cuda_library,           \
      OPTION_FIELD(cuda_library),                                                        \
      "path of the driver library to load instead of `libcuda.so.1`; one that does not " \
      "load or is not a driver fails runtime creation, `auto` included (it does not "    \
      "fall back to simulated GPUs); empty is an error")                                 \
    X("GPUMEM_OOM_SNAPSHOT", NULL, GPUMEM_READ_BY_LIBRARY, parse_path,                  \
      OPTION_FIELD(oom_snapshot),                                                        \
      "path of a file where the process's first out of memory writes a snapshot of "    \
      "its runtime's logical devices (JSON in PyTorch's snapshot structure; `python3 "  \
      "-m gpumem.map PATH -o snap.pickle` makes the pickle its memory viewer opens; "    \
      "`docs/snapshot.md`); empty or unset = none")                                      \
    X("GPUMEM_LEDGER", NULL, GPUMEM_READ_BY_LIBRARY, parse_off_switch,                  \
      OPTION_FIELD(ledger_off),                                                          \
      "`on` (default) / `off`: whether the runtime takes part in the ledger of each GPU "\
      "it has pools on, a file shared by the user's gpumem processes (admission of "     \
      "budgets, memory given back on request, `gpumem-smi`; `docs/ledger.md`). `off` "   \
      "creates and opens no file. Simulated GPUs have one only when shared "            \
      "(`GPUMEM_SIM_MACHINE`). A ledger that cannot be used (unreadable, corrupt, "      \
      "another version, every slot held) is named once in the log at WARNING and the "   \
      "process goes on without it. Also `true`/`false`, `1`/`0`, `yes`/`no`")           \
    X("GPUMEM_LEDGER_DIR", NULL, GPUMEM_READ_BY_LIBRARY, parse_ledger_dir,              \
      OPTION_FIELD(ledger_dir),                                                          \
      "folder of the ledger files, `gpumem-<GPU UUID>.u<uid>.ledger` (default "         \
      "`/dev/shm`); every process that shares a GPU must name the same one")            \
    X("GPUMEM_SHARE_WAIT_MS", NULL, GPUMEM_READ_BY_LIBRARY, parse_share_wait,           \
      OPTION_FIELD(share_wait_ms),                                                       \
      "longest wait, in ms (0 to 60000; default 500), of a process that lacks memory "   \
      "for the other processes of its GPU to give their cached memory back before it "   \
      "tries again")                                                                     \
    X("GPUMEM_SHARE_GIVE", NULL, GPUMEM_READ_BY_LIBRARY, parse_off_switch,              \
      OPTION_FIELD(share_give_off),                                                      \
      "`on` (default) / `off`: whether this process gives its cached, unused memory "    \
      "back when another process of its GPU asks (a thread per ledger waits for "       \
      "requests, so an idle process answers too); `off`: it keeps it, and requesters "  \
      "do not wait for it")                                                              \
    X("GPUMEM_GROWTH_TRIM", NULL, GPUMEM_READ_BY_LIBRARY, parse_on_switch,              \
      OPTION_FIELD(growth_trim),                                                         \
      "`on` (default) / `off`: growing pools on an address range (CUDA's virtual "     \
      "memory management, simulated GPUs) give back granules of their holes (idle "     \
      "ones and the largest holes first), as many as a mapping past their peak "        \
      "lacks, so that their peak reserved memory stays close to their peak live "        \
      "bytes, never above what it is with `off` (placement does not change); an "       \
      "allocation that lands on them maps them again (`docs/bench.md`), and once "      \
      "such landings have mapped back as much as the peak (divided by the window), "    \
      "the trim stops for good, so that a workload that does not repeat within the "    \
      "window (random churn) does not swap granules for ever; `off`: their "            \
      "peak grows by what requests lack, with no driver call once the peak is "         \
      "reached. Also the flags `GPUMEM_OPTIONS_TRIM_GROWTH` and "                        \
      "`GPUMEM_OPTIONS_NO_TRIM_GROWTH`")                                                 \
    X("GPUMEM_GROWTH_TRIM_WINDOW", NULL, GPUMEM_READ_BY_LIBRARY, parse_fraction,        \
      OPTION_FIELD(growth_trim_window),                                                  \
      "the trim's window, from 0 to 1 (default 1): a hole's granule is idle, and the "  \
      "trim may give it back, once it has stayed free while the pool handed out this "  \
      "fraction of its peak reserved bytes; 1: a workload that repeats maps and unmaps " \
      "nothing once warm; lower: a lower peak, bought with mappings, and the trim "     \
      "stops later (once allocations have mapped back its peak divided by the window; " \
      "never at 0) (`docs/bench.md`, \"The trim's window\")")                            \
    X("GPUMEM_GROWTH_IDLE_RELEASE_MS", NULL, GPUMEM_READ_BY_LIBRARY,                  \
      parse_idle_release, OPTION_FIELD(growth_idle_release_ms),                          \
      "a growing pool that has made no allocation and no free for this long, in ms "    \
      "(0 = never; at most 86400000, a day; default 60000), gives its free memory back " \
      "to the GPU as `gpumem_release_unused` would, without waiting for streams' work " \
      "(a thread per runtime watches; its next allocations map it again): a process "   \
      "that sits idle holds only what it uses")                                          \
    X("GPUMEM_RECORD_HISTORY", NULL, GPUMEM_READ_BY_LIBRARY, parse_record_history,      \
      OPTION_FIELD(record_history),                                                      \
      "`N`: each logical device keeps an event history of its last N events "            \
      "(allocations, frees, regions taken and given back, out of memory; 64 bytes "      \
      "each, N at most 268435456), shown in snapshots as PyTorch's `device_traces` and " \
      "written as a replayable trace (`docs/snapshot.md`); `0` or unset = off, as "      \
      "`gpumem_record_history` sets it")                                                 \
    X("GPUMEM_LIBRARY", NULL, GPUMEM_READ_BY_PYTHON, NULL, OPTION_NO_FIELD,              \
      "for the Python package: the `libgpumem.so` to load")                              \
    X("CUDA_VISIBLE_DEVICES", NULL, GPUMEM_READ_BY_DRIVER, NULL, OPTION_NO_FIELD,        \
      "read by the CUDA driver, not by gpumem: the GPUs it hides are not listed; when "  \
      "it hides them all, gpumem's message that no GPU was found quotes it")
/* clang-format on */

#endif /* GPUMEM_OPTION_VARS_H */
