/* Check, with assertions that cost nothing while they pass.
 *
 * Check's ck_assert_msg (and every ck_assert_* built on it) reports each
 * passing assertion's file and line to the test runner with a write(2)
 * (_mark_point), so that a test that crashes can be reported at the last
 * assertion it passed. The suites here assert element by element inside
 * loops: test_gemm alone made 899,163 such system calls, about half its
 * time on a VM where a system call is dear, and more under the sanitizers.
 * Here a passing assertion does nothing and a failing one reports as Check
 * does (file, line, expression and message); a test that crashes is
 * reported at its start, or at its last explicit mark_point().
 *
 * Every suite includes this header (gt_testutil.h does) after <check.h>,
 * or instead of it. */
#ifndef GT_CHECK_H
#define GT_CHECK_H

#include <check.h>

#undef ck_assert_msg
#define ck_assert_msg(expr, ...) \
  ((expr) ? (void)0 : _ck_assert_failed(__FILE__, __LINE__, "Assertion '" #expr "' failed", ##__VA_ARGS__))

#endif
