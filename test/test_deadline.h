/* SPDX-License-Identifier: BSD-3-Clause */
/* Ends the test process when a test body hangs: a waiting loop that never
 * returns must fail the suite, not stall it */
#ifndef SPAN_TEST_DEADLINE_H_
#define SPAN_TEST_DEADLINE_H_

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>

class deadline {
public:
    deadline(unsigned seconds, const std::string &what) :
        m_thread([this, seconds, what] {
            std::unique_lock<std::mutex> lock(m_lock);
            if (!m_cv.wait_for(lock, std::chrono::seconds(seconds),
                               [this] { return m_done; })) {
                fprintf(stderr, "FAILED: %s did not finish in %u s\n",
                        what.c_str(), seconds);
                fflush(stderr);
                _exit(1);
            }
        })
    {
    }

    ~deadline()
    {
        {
            std::lock_guard<std::mutex> lock(m_lock);
            m_done = true;
        }
        m_cv.notify_one();
        m_thread.join();
    }

private:
    std::mutex              m_lock;
    std::condition_variable m_cv;
    bool                    m_done = false;
    std::thread             m_thread;
};

#endif
