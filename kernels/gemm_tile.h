/* The 12 x 32 register tile both packed GEMM micro-kernels (kernels/gemm.c,
 * kernels/gemm_bf16.c) accumulate in: 24 vectors c<r>0, c<r>1 for rows r
 * 0..11, declared by GT__TILE_ROWS(GT__TILE_DECL), and one epilogue that
 * folds alpha and beta in and stores the mr x nr corner (needs C, ldc, mr,
 * nr, alpha, beta in scope). GT__TILE_PREFETCH requests the 12 rows of
 * Cnext, the tile the next call writes, a whole k loop ahead. Expanded
 * inside AVX-512 code only. Private to kernels/. */
#ifndef GEMTRAIN_GEMM_TILE_H
#define GEMTRAIN_GEMM_TILE_H

#define GT__TILE_DECL(r) __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = _mm512_setzero_ps();
#define GT__TILE_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

/* alpha and beta folded in only when they are not 1 (C read only when beta
 * is not 0), one rule for every row */
#define GT__TILE_STORE(r)                                                      \
  if (r < mr) {                                                                \
    float *cr = C + r * ldc;                                                   \
    __m512 x0 = c##r##0, x1 = c##r##1;                                         \
    if (scale) x0 = _mm512_mul_ps(va, x0), x1 = _mm512_mul_ps(va, x1);         \
    if (mode == 1) {                                                           \
      x0 = _mm512_add_ps(x0, _mm512_maskz_loadu_ps(m0, cr));                   \
      x1 = _mm512_add_ps(x1, _mm512_maskz_loadu_ps(m1, cr + 16));              \
    } else if (mode == 2) {                                                    \
      x0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, cr), x0);             \
      x1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, cr + 16), x1);        \
    }                                                                          \
    _mm512_mask_storeu_ps(cr, m0, x0);                                         \
    _mm512_mask_storeu_ps(cr + 16, m1, x1);                                    \
  }

#define GT__TILE_EPILOGUE                                                                       \
  __mmask16 m0 = (__mmask16)(nr >= 16 ? 0xFFFF : (1u << nr) - 1);                                \
  __mmask16 m1 = (__mmask16)(nr >= 32 ? 0xFFFF : nr > 16 ? (1u << (nr - 16)) - 1 : 0);           \
  __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);                                  \
  const int scale = alpha != 1.0f, mode = beta == 0.0f ? 0 : beta == 1.0f ? 1 : 2;               \
  GT__TILE_ROWS(GT__TILE_STORE)

#define GT__TILE_PREFETCH                                               \
  for (int64_t r = 0; r < 12; r++) {                                    \
    _mm_prefetch((const char *)(Cnext + r * ldc), _MM_HINT_ET0);        \
    _mm_prefetch((const char *)(Cnext + r * ldc + 16), _MM_HINT_ET0);   \
  }

/* Column j of C's M rows in GT__GEMV_BT_COLS below
 * (tail: the mask of K's last K % 16 k). */
#define GT__GEMV_BT_COL(LOAD)                                                                  \
  {                                                                                            \
    const float *b = B + j * ldb;                                                              \
    for (int64_t i = 0; i < M; i++) {                                                          \
      const float *a = A + i * lda;                                                            \
      __m512 acc = _mm512_setzero_ps();                                                        \
      int64_t k = 0;                                                                           \
      for (; k + 16 <= K; k += 16)                                                             \
        acc = _mm512_fmadd_ps(LOAD(_mm512_loadu_ps(a + k)), LOAD(_mm512_loadu_ps(b + k)), acc); \
      if (k < K)                                                                               \
        acc = _mm512_fmadd_ps(LOAD(_mm512_maskz_loadu_ps(tail, a + k)),                        \
                              LOAD(_mm512_maskz_loadu_ps(tail, b + k)), acc);                  \
      float dot = alpha * _mm512_reduce_add_ps(acc);                                           \
      float *c = C + i * ldc + j;                                                              \
      *c = beta == 0.0f ? dot : dot + beta * *c;                                               \
    }                                                                                          \
  }

/* A few rows times B^T (decoding: x [M <= 4, K] times W [N, K]^T), where
 * packing would copy all of W for one use: each output is a dot product of
 * two contiguous rows, memory-bound as it must be, LOAD(v) the operand made
 * of 16 loaded floats (as they are, or rounded to bf16). Columns j0 <= j <
 * j1, with the same operations for every output (needs M, K, alpha, A, lda,
 * B, ldb, beta, C, ldc in scope); gt__gemm_cols (gemm_blocking.h) hands
 * out the chunks of columns. */
#define GT__GEMV_BT_COLS(LOAD, j0, j1)                                                         \
  {                                                                                            \
    __mmask16 tail = (__mmask16)((1u << (K % 16)) - 1);                                        \
    for (int64_t j = (j0); j < (j1); j++) GT__GEMV_BT_COL(LOAD)                                \
  }

#endif
