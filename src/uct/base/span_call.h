/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A call of a runtime span loads (libcuda, HSA) whose failure is logged
 * with the call as written and the runtime's words for the error, as UCX's
 * UCT_CUDADRV_FUNC_LOG_ERR logs one. Each loader defines its macro on this
 * one (SPAN_LIBCUDA_CALL, SPAN_LIBROCM_HSA_CALL). Every call that returns
 * a status goes through it; only calls that return none (HSA's signal
 * values) and those that render an error's words are made directly.
 */
#ifndef SPAN_CALL_H_
#define SPAN_CALL_H_

#include <ucs/debug/log_def.h>

/* Calls _lib._func(...), where _args is the text of the arguments, and
 * evaluates to what it returns, of _type; where _failed(result) holds,
 * logs at _level (a ucs_log_level_t: an error where the caller fails, a
 * warning where it goes on, debug where a failure is an answer, such as
 * "host memory") "span <_name>: <_func>(<_args>) failed: <words>", the
 * words written by _error(result, buf, size) only where that level logs */
#define SPAN_CALL(_level, _name, _lib, _type, _failed, _error, _func, _args, \
                  ...) \
    ({ \
        _type _span_result = (_lib)._func(__VA_ARGS__); \
        char _span_words[128]; \
        if (_failed(_span_result)) { \
            ucs_log(_level, "span %s: %s(%s) failed: %s", _name, #_func, \
                    _args, _error(_span_result, _span_words, \
                                  sizeof(_span_words))); \
        } \
        _span_result; \
    })

#endif
