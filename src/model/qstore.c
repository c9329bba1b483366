#include "model/qstore.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/team.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"

gt_store_dtype gt_qstore_embed_default(gt_store_dtype q) {
  return q == GT_STORE_INT8 || q == GT_STORE_NF4 ? GT_STORE_BF16 : q;
}

gt_rc gt_qstore_decide(gt_model *m, const gt_config *c, gt_err *err) {
  gt_store_dtype q = GT_STORE_F32, eq;
  if (c->lora_weight_qtype[0]) {
    gt_rc rc = gt_store_dtype_parse(c->lora_weight_qtype, &q, err);
    if (rc) return rc;
  }
  eq = gt_qstore_embed_default(q);
  if (c->lora_embedding_qtype[0] && strcmp(c->lora_embedding_qtype, "auto")) {
    gt_rc rc = gt_store_dtype_parse(c->lora_embedding_qtype, &eq, err);
    if (rc) return rc;
  }
  gt_qstore_apply(m, q, eq);
  return GT_OK;
}

/* The tied embedding or the PLE table (a head-unit tensor at its offset). */
static int gt__is_table(const gt_model *m, const gt_tensor_info *t) {
  return t->layer < 0 && (t->offset == m->embed_offset || t->offset == m->ple_embed_offset);
}

void gt_qstore_apply(gt_model *m, gt_store_dtype q, gt_store_dtype eq) {
  m->embed_qtype = m->ple_embed_qtype = m->ple_proj_qtype = GT_STORE_F32;
  for (int64_t l = 0; l < m->n_layers; l++) memset(m->layers[l].qtype, GT_STORE_F32, sizeof m->layers[l].qtype);
  for (int i = 0; i < m->n_tensors; i++) {
    gt_tensor_info *t = &m->tensors[i];
    /* which slot it fills (the offsets name it: the table's, or placed) */
    unsigned char *slot = NULL;
    if (t->layer < 0) {
      slot = t->offset == m->embed_offset       ? &m->embed_qtype
             : t->offset == m->ple_embed_offset ? &m->ple_embed_qtype
             : t->offset == m->ple_proj_offset  ? &m->ple_proj_qtype
                                                : NULL;
    } else {
      gt_layer_desc *L = &m->layers[t->layer];
      for (int s = 0; s < GT_P_NSLOTS; s++)
        if (gt_layer_slot_is_projection((gt_lparam)s) && L->slot_offset[s] == t->offset) slot = &L->qtype[s];
    }
    /* the products' and lookups' matrices only: not the MoE router or
     * experts, which kernels/moe.c reads as float32; the lookup tables as
     * eq, the rest (the PLE projection is a Linear) as q */
    gt_store_dtype want = slot && gt__is_table(m, t) ? eq : q;
    int quant = want != GT_STORE_F32 && t->role == GT_ROLE_FROZEN && t->ndim == 2 && slot;
    t->dtype = quant ? want : GT_STORE_F32;
    t->words = quant ? gt_q_words((gt_qtype)want, t->shape[0], gt_qstore_cols(t)) : t->numel;
    if (quant) *slot = (unsigned char)want;
  }
}

gt_store_dtype gt_qstore_dtype(const gt_model *m) {
  for (int i = 0; i < m->n_tensors; i++)
    if (m->tensors[i].dtype != GT_STORE_F32 && !gt__is_table(m, &m->tensors[i])) return m->tensors[i].dtype;
  return GT_STORE_F32;
}

gt_store_dtype gt_qstore_embed_dtype(const gt_model *m) {
  return m->embed_qtype != GT_STORE_F32 ? (gt_store_dtype)m->embed_qtype : (gt_store_dtype)m->ple_embed_qtype;
}

int gt_qstore_has_frozen_table(const gt_model *m) {
  for (int i = 0; i < m->n_tensors; i++)
    if (m->tensors[i].role == GT_ROLE_FROZEN && m->tensors[i].ndim == 2 && gt__is_table(m, &m->tensors[i])) return 1;
  return 0;
}

gt_rc gt_qstore_convert(const gt_tensor_info *to, float *dst, const gt_tensor_info *from, const float *src, gt_err *err) {
  if (to->dtype == from->dtype) {
    memcpy(dst, src, (size_t)to->words * sizeof(float));
    return GT_OK;
  }
  if (from->dtype == GT_STORE_F32) return gt_qstore_put_rows(to, dst, 0, to->shape[0], src, err);
  if (to->dtype == GT_STORE_F32) {
    gt_qstore_rows(from, src, 0, from->shape[0], dst);
    return GT_OK;
  }
  /* one quantized format to another: through float32 a chunk at a time */
  int64_t rows = to->shape[0], cols = gt_qstore_cols(to), ck = gt_qstore_chunk_rows(to);
  if (ck > rows) ck = rows;
  gt_mem scratch;
  gt_mem_init(&scratch);
  float *x = gt_mem_alloc_uninit_named(&scratch, GT_MEM_TEMP, (size_t)(ck * cols) * sizeof(float), "conversion scratch");
  if (!x)
    return gt_err_set(err, GT_ERR_NOMEM, "qstore: no memory to convert tensor '%s' from %s to %s (a scratch of %lld "
                      "floats)", to->name, gt_store_dtype_name(from->dtype), gt_store_dtype_name(to->dtype),
                      (long long)(ck * cols));
  gt_rc rc = GT_OK;
  for (int64_t r0 = 0; r0 < rows && !rc; r0 += ck) {
    int64_t n = rows - r0 < ck ? rows - r0 : ck;
    gt_qstore_rows(from, src, r0, n, x);
    rc = gt_qstore_put_rows(to, dst, r0, n, x, err);
  }
  gt_mem_free(&scratch, x);
  return rc;
}

gt_qweight gt_qstore_view(const gt_tensor_info *t, const float *base) {
  return gt_qweight_at((gt_qtype)t->dtype, base, t->shape[0], gt_qstore_cols(t));
}

void gt_qstore_rows(const gt_tensor_info *t, const float *base, int64_t r0, int64_t n, float *out) {
  int64_t cols = gt_qstore_cols(t);
  if (t->dtype == GT_STORE_F32) {
    memcpy(out, base + r0 * cols, (size_t)(n * cols) * sizeof(float));
    return;
  }
  gt_qweight w = gt_qstore_view(t, base);
  gt_dequantize_rows(&w, r0, n, out);
}

/* about 4 Mi elements a chunk (a test makes it smaller: gt_qstore_set_chunk_elems) */
static int64_t gt__chunk_elems = (int64_t)1 << 22;

void gt_qstore_set_chunk_elems(int64_t n) { gt__chunk_elems = n > 0 ? n : (int64_t)1 << 22; }

int64_t gt_qstore_chunk_rows(const gt_tensor_info *t) {
  /* a multiple of the nf4 block in rows keeps every chunk's first element
   * on a block (and a byte) boundary */
  int64_t cols = gt_qstore_cols(t), k = cols > 0 ? gt__chunk_elems / (GT_Q_NF4_BLOCK * cols) : 1;
  return GT_Q_NF4_BLOCK * (k > 0 ? k : 1);
}

gt_rc gt_qstore_put_rows(const gt_tensor_info *t, float *base, int64_t r0, int64_t n, const float *src, gt_err *err) {
  int64_t rows = t->shape[0], cols = gt_qstore_cols(t);
  if (t->dtype == GT_STORE_F32) {
    memcpy(base + r0 * cols, src, (size_t)(n * cols) * sizeof(float));
    return GT_OK;
  }
  gt_qtype q = (gt_qtype)t->dtype;
  if (r0 == 0 && n == rows) { /* the whole tensor at once */
    memset(base, 0, (size_t)t->words * sizeof(float)); /* the padding after the elements too */
    gt_quantize(q, src, rows, cols, base);
    return GT_OK;
  }
  /* the chunk quantized on its own (its blocks are the tensor's: aligned),
   * then its elements and scales copied to their places */
  int64_t cw = gt_q_words(q, n, cols);
  gt_mem scratch;
  gt_mem_init(&scratch);
  float *tmp = gt_mem_alloc_uninit_named(&scratch, GT_MEM_TEMP, (size_t)cw * sizeof(float), "quantization scratch");
  if (!tmp)
    return gt_err_set(err, GT_ERR_NOMEM, "qstore: no memory to store rows %lld..%lld of tensor '%s' as %s (a scratch "
                      "of %lld words)", (long long)r0, (long long)(r0 + n - 1), t->name, gt_store_dtype_name(t->dtype),
                      (long long)cw);
  gt_quantize(q, src, n, cols, tmp);
  gt_qweight dst = gt_qstore_view(t, base), part = gt_qweight_at(q, tmp, n, cols);
  int64_t e0 = r0 * cols, en = n * cols;
  int64_t b0 = gt_q_data_bytes(q, e0), bn = gt_q_data_bytes(q, e0 + en) - b0;
  int64_t dend = gt_q_data_bytes(q, rows * cols), dpad = (dend + 3) / 4 * 4;
  if (r0 + n == rows && dpad > dend) memset((char *)base + dend, 0, (size_t)(dpad - dend)); /* the padding */
  memcpy((char *)base + b0, part.data, (size_t)bn);
  int64_t s0 = q == GT_Q_INT8 ? r0 : q == GT_Q_NF4 ? e0 / GT_Q_NF4_BLOCK : 0;
  int64_t sn = gt_q_scale_count(q, en, n);
  if (sn) memcpy((float *)dst.scales + s0, part.scales, (size_t)sn * sizeof(float));
  gt_mem_free(&scratch, tmp);
  return GT_OK;
}

typedef struct gt__lookup_args {
  const gt_model *m;
  gt_qweight w;
  const int32_t *tok;
  int64_t dim;
  float scale;
  float *out;
} gt__lookup_args;

static void gt__lookup_part(void *arg, int64_t i0, int64_t i1) {
  const gt__lookup_args *a = arg;
  for (int64_t i = i0; i < i1; i++) {
    float *o = a->out + i * a->dim;
    gt_dequantize_rows(&a->w, a->tok[i], 1, o);
    if (a->m->bf16_act) gt_bf16_round(o, a->dim);
    for (int64_t c = 0; c < a->dim; c++) o[c] *= a->scale;
  }
}

void gt_qstore_lookup(const gt_model *m, int qtype, const float *table, int64_t rows, int64_t dim, const int32_t *tok,
                      int64_t n, float scale, float *out) {
  if (qtype == GT_STORE_F32) {
    gt_embedding_forward(out, tok, table, n, (int)dim, scale);
    return;
  }
  gt__lookup_args a = {m, gt_qweight_at((gt_qtype)qtype, table, rows, dim), tok, dim, scale, out};
  gt_team_for(n * dim > 65536, n, gt__lookup_part, &a);
}

static void gt__unit_range(const gt_model *m, int64_t u, int *i0, int *i1) {
  int layer = (int)u - 1, i = 0;
  while (i < m->n_tensors && m->tensors[i].layer != layer) i++;
  *i0 = i;
  while (i < m->n_tensors && m->tensors[i].layer == layer) i++;
  *i1 = i;
}

void gt_qstore_round_block(const gt_model *m, int64_t u, float *block, int64_t from, int64_t n) {
  if (!gt_qstore_unit_quantized(m, u)) {
    gt_bf16_round(block + from, n);
    return;
  }
  int64_t uoff, ucnt;
  gt_model_unit(m, u, &uoff, &ucnt);
  int i0, i1;
  gt__unit_range(m, u, &i0, &i1);
  const gt_layer_desc *L = u > 0 ? &m->layers[u - 1] : NULL;
  for (int i = i0; i < i1; i++) {
    const gt_tensor_info *t = &m->tensors[i];
    if (t->dtype != GT_STORE_F32) continue;
    /* the tensor's words inside [from, from + n); the experts (the layer's
     * last tensors, float32) as this device holds them */
    int64_t a = t->offset - uoff, b = a + t->words;
    if (t->ndim == 3 && L) {
      if (t->offset != L->slot_offset[GT_P_EXPERT_GATE_UP]) continue;
      a = L->slot_rel[GT_P_EXPERT_GATE_UP], b = L->local_count;
    }
    if (a < from) a = from;
    if (b > from + n) b = from + n;
    if (b > a) gt_bf16_round(block + a, b - a);
  }
}

int gt_qstore_unit_quantized(const gt_model *m, int64_t u) {
  int i0, i1;
  gt__unit_range(m, u, &i0, &i1);
  for (int i = i0; i < i1; i++)
    if (m->tensors[i].dtype != GT_STORE_F32) return 1;
  return 0;
}

const char *gt_qstore_name(const gt_model *m) { return gt_store_dtype_name(gt_qstore_dtype(m)); }

const char *gt_qstore_embed_name(const gt_model *m) { return gt_store_dtype_name(gt_qstore_embed_dtype(m)); }

const char *gt_qstore_describe(const gt_model *m) {
  /* [projections][tables]: literals, so the text outlives no buffer */
  static const char *const d[GT_STORE_NDTYPES][GT_STORE_NDTYPES] = {
      {"float32", "float32, embedding bfloat16", "float32, embedding int8", "float32, embedding nf4"},
      {"bfloat16, embedding float32", "bfloat16", "bfloat16, embedding int8", "bfloat16, embedding nf4"},
      {"int8, embedding float32", "int8, embedding bfloat16", "int8", "int8, embedding nf4"},
      {"nf4, embedding float32", "nf4, embedding bfloat16", "nf4, embedding int8", "nf4"}};
  gt_store_dtype q = gt_qstore_dtype(m), eq = gt_qstore_has_frozen_table(m) ? gt_qstore_embed_dtype(m) : q;
  return (unsigned)q < GT_STORE_NDTYPES && (unsigned)eq < GT_STORE_NDTYPES ? d[q][eq] : "?";
}
