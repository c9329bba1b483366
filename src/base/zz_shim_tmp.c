/* TEMPORARY until the noabort branch merges. */
#include "mesh/mesh.h"
gt_rc gt_mesh_take_error(gt_mesh *m, gt_err *err) { (void)m; (void)err; return GT_OK; }
