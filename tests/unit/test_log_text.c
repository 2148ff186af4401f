/* The training log line's rates keep their digits: a slow run's 0.04 samples/s is not "0.0". */
#include <string.h>

#include "core/log.h"
#include "test.h"

TEST(log_rates_keep_their_digits) {
    static const struct {
        double v;
        const char *want;
    } cases[] = {{0.0412, "0.0412"}, {0.04, "0.04"}, {4.123, "4.12"}, {42.13, "42.1"}, {99.94, "99.9"},
                 {1908.3, "1908"}, {0, "0"}, {0.00031, "0.00031"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[32];
        CHECK_MSG(strcmp(log_rate_text(cases[i].v, buf, sizeof buf), cases[i].want) == 0, "%g: %s, want %s",
                  cases[i].v, buf, cases[i].want);
    }
}
