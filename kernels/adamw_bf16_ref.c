/* Scalar reference of the AdamW step with a bf16 first moment: optax.adamw
 * (scale_by_adam with mu_dtype=bfloat16): the moment is read as float32,
 * updated and used in float32, and kept cast to bf16 (round to nearest even). */
#include <math.h>

#include "kernels/bf16.h"
#include "kernels/kernels.h"

void gt_adamw_update_mu_bf16_ref(float *p, const float *g, uint16_t *m, float *v, int64_t n,
                                 const gt_adamw_hparams *h) {
  const float bc1 = (float)(1.0 - pow((double)h->b1, (double)h->t));
  const float bc2 = (float)(1.0 - pow((double)h->b2, (double)h->t));
  for (int64_t i = 0; i < n; i++) {
    const float gi = g[i] * h->grad_scale;
    const float mf = h->b1 * gt_bf16_to_f32(m[i]) + (1.0f - h->b1) * gi;
    v[i] = h->b2 * v[i] + (1.0f - h->b2) * (gi * gi);
    const float mh = mf / bc1;
    const float vh = v[i] / bc2;
    float u = mh / (sqrtf(vh + h->eps_root) + h->eps);
    u = u + h->weight_decay * p[i];
    p[i] = p[i] - h->lr * u;
    m[i] = gt_f32_to_bf16(mf);
  }
}
