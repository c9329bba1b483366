#include "gemtrain/common.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

gt_rc gt_err_set(gt_err *err, gt_rc rc, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    err->rc = rc;
  }
  return rc;
}

void gt_err_clear(gt_err *err) {
  if (err) {
    err->rc = GT_OK;
    err->msg[0] = '\0';
  }
}

const char *gt_rc_name(gt_rc rc) {
  switch (rc) {
    case GT_OK: return "ok";
    case GT_ERR_ARG: return "bad argument";
    case GT_ERR_CONFIG: return "config error";
    case GT_ERR_IO: return "I/O error";
    case GT_ERR_FORMAT: return "format error";
    case GT_ERR_NOMEM: return "out of memory";
    case GT_ERR_PLAN: return "does not fit";
    case GT_ERR_NUMERIC: return "non-finite value";
    case GT_ERR_INTERNAL: return "internal error";
  }
  return "unknown";
}

const char *gt_version(void) { return GT_VERSION; }
