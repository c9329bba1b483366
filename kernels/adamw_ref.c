/* Scalar AdamW reference, written step by step after optax.adamw:
 * scale_by_adam, add_decayed_weights, scale_by_learning_rate. */
#include <math.h>

#include "kernels/kernels.h"

void gt_adamw_update_ref(float *p, const float *g, float *m, float *v, int64_t n,
                         const gt_adamw_hparams *h) {
  const float bc1 = (float)(1.0 - pow((double)h->b1, (double)h->t));
  const float bc2 = (float)(1.0 - pow((double)h->b2, (double)h->t));
  for (int64_t i = 0; i < n; i++) {
    const float gi = g[i] * h->grad_scale;
    m[i] = h->b1 * m[i] + (1.0f - h->b1) * gi;
    v[i] = h->b2 * v[i] + (1.0f - h->b2) * (gi * gi);
    const float mh = m[i] / bc1;
    const float vh = v[i] / bc2;
    float u = mh / (sqrtf(vh + h->eps_root) + h->eps);
    u = u + h->weight_decay * p[i];
    p[i] = p[i] - h->lr * u;
  }
}
