/* A sweep point's identity (sweep.h): a hash of the configuration its run
 * computes with, so a changed config file, configs/base.json, preset or
 * sweep default makes another point rather than reusing the record and the
 * run directory of the old one. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "sweep/sweep.h"

void gt_sweep_config_identity(const gt_config *cfg, char *buf, size_t n) {
  /* a copy on the heap: gt_config is tens of KiB */
  gt_config *c = malloc(sizeof *c);
  char *json = NULL;
  if (c) {
    memcpy(c, cfg, sizeof *c);
    /* where the run is, not what it computes: the point's own name, and
     * the sweep directory (a moved sweep still owns its points) */
    c->run_name[0] = '\0';
    c->base_output_directory[0] = '\0';
    json = gt_config_to_json(c);
    free(c);
  }
  if (!json) {
    /* unknown: matches no record and no directory, so the point runs */
    snprintf(buf, n, "%s", "");
    return;
  }
  snprintf(buf, n, "cfg-%016llx", (unsigned long long)gt_fnv1a(GT_FNV1A_INIT, json, strlen(json)));
  free(json);
}

void gt_sweep_refusal_identity(const char *msg, char *buf, size_t n) {
  snprintf(buf, n, "refused-%016llx", (unsigned long long)gt_fnv1a(GT_FNV1A_INIT, msg, strlen(msg)));
}
