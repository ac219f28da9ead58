// What the C++ tests of libgpumem_torch share: a check that counts its failures
// (main returns `failures ? 1 : 0`), and an environment with none of the
// variables the library reads (option_vars.h), TensorFlow's spellings included,
// so that the caller's shell cannot change what a test sees.
#ifndef GPUMEM_TEST_CPP_CHECK_H
#define GPUMEM_TEST_CPP_CHECK_H

#include "option_vars.h"

#include <cstdio>
#include <cstdlib>

static int failures;

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__,        \
                         #cond);                                                         \
            failures++;                                                                  \
        }                                                                                \
    } while (0)

static inline void clear_library_env()
{
    struct var {
        const char *name, *alias;
        gpumem_option_reader reader;
    };
#define CPP_CHECK_VAR(name, alias, reader, parse, field, help) {name, alias, reader},
    const var vars[] = {GPUMEM_OPTION_VARS(CPP_CHECK_VAR)};
#undef CPP_CHECK_VAR
    for (const var &v : vars) {
        if (v.reader != GPUMEM_READ_BY_LIBRARY)
            continue;
        unsetenv(v.name);
        if (v.alias)
            unsetenv(v.alias);
    }
}

#endif // GPUMEM_TEST_CPP_CHECK_H
