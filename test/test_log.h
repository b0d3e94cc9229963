/* SPDX-License-Identifier: BSD-3-Clause */
/* Counts and silences UCX error lines while alive: a refusal must log */
#ifndef SPAN_TEST_LOG_H_
#define SPAN_TEST_LOG_H_

#include <ucs/debug/log_def.h>

#include <string>
#include <vector>

class log_counter {
public:
    log_counter() { lines().clear(); ucs_log_push_handler(handler); }
    ~log_counter() { ucs_log_pop_handler(); }

    static size_t count() { return lines().size(); }

    static size_t count(const std::string &part)
    {
        size_t n = 0;
        for (auto &l : lines()) {
            n += (l.find(part) != std::string::npos);
        }
        return n;
    }

private:
    static std::vector<std::string> &lines()
    {
        static std::vector<std::string> l;
        return l;
    }

    static ucs_log_func_rc_t handler(const char *, unsigned, const char *,
                                     ucs_log_level_t level,
                                     const ucs_log_component_config_t *,
                                     const char *message, va_list ap)
    {
        if (level > UCS_LOG_LEVEL_ERROR) {
            return UCS_LOG_FUNC_RC_CONTINUE;
        }
        char buf[1024];
        vsnprintf(buf, sizeof(buf), message, ap);
        lines().push_back(buf);
        return UCS_LOG_FUNC_RC_STOP;
    }
};

#endif
