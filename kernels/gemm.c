/* gt_sgemm: our own packed sgemm (BLIS layout: packed panels, one register-
 * blocked micro-kernel), because the OpenBLAS 0.3.21 that Debian ships does
 * not recognise every CPU we run on and then falls back to its generic SSE3
 * ("Prescott") kernel at a tenth of the machine's speed; the kernel is chosen
 * when the library loads, so a program cannot fix that for itself.
 *
 * Loops (BLIS): jc over N by NC, pc over K by KC (pack B: KC x NC into NR-wide
 * panels), ic over M by MC (pack A: MC x KC into MR-tall panels), jr over NR
 * panels, ir over MR panels -> micro-kernel MR x NR over kc.
 * Threads split the ic loop (or the jr loop when M is small). Each element of
 * C is summed by one thread in a fixed k order, so the result does not depend
 * on the thread count. Without AVX-512 the call goes to cblas_sgemm. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#include <omp.h>

enum { MR = 12, NR = 32, KC = 256, MC = 192, NC = 2048 };

/* element (i,k) of op(A), (k,j) of op(B) */
#define OPA(i, k) (transA ? A[(int64_t)(k) * lda + (i)] : A[(int64_t)(i) * lda + (k)])

static void gt__pack_a(float *dst, int transA, const float *A, int64_t lda, int64_t i0, int64_t mc,
                       int64_t k0, int64_t kc) {
  if (transA) {
    /* k outer: each k reads one contiguous row segment. Walking panels first
     * would read columns at a stride of lda, and a power-of-two lda maps every
     * row to the same L1 set. */
    for (int64_t k = 0; k < kc; k++) {
      const float *src = A + (k0 + k) * lda + i0;
      int64_t p = 0;
      for (; p + MR <= mc; p += MR) memcpy(dst + p * kc + k * MR, src + p, MR * sizeof(float));
      if (p < mc) {
        float *d = dst + p * kc + k * MR;
        int64_t r = 0;
        for (; r < mc - p; r++) d[r] = src[p + r];
        for (; r < MR; r++) d[r] = 0.0f;
      }
    }
    return;
  }
  for (int64_t p = 0; p < mc; p += MR) {
    float *d = dst + p * kc;
    int64_t mr = mc - p < MR ? mc - p : MR;
    const float *rows[MR];
    for (int64_t r = 0; r < MR; r++) rows[r] = A + (i0 + p + (r < mr ? r : 0)) * lda + k0;
    /* k outer so each written 12-float group is contiguous; the 12 source
     * rows stream in parallel */
    for (int64_t k = 0; k < kc; k++) {
      float *dk = d + k * MR;
      for (int64_t r = 0; r < MR; r++) dk[r] = r < mr ? rows[r][k] : 0.0f;
    }
  }
}

static void gt__pack_b_panel(float *d, int transB, const float *B, int64_t ldb, int64_t k0, int64_t kc,
                             int64_t j0, int64_t nr) {
  if (!transB) {
    __mmask16 m0 = (__mmask16)(nr >= 16 ? 0xFFFF : (1u << nr) - 1);
    __mmask16 m1 = (__mmask16)(nr >= 32 ? 0xFFFF : nr > 16 ? (1u << (nr - 16)) - 1 : 0);
    for (int64_t k = 0; k < kc; k++) {
      const float *src = B + (k0 + k) * ldb + j0;
      _mm512_storeu_ps(d + k * NR, _mm512_maskz_loadu_ps(m0, src));
      _mm512_storeu_ps(d + k * NR + 16, _mm512_maskz_loadu_ps(m1, src + 16));
    }
  } else {
    for (int64_t c = 0; c < NR; c++) {
      if (c < nr) {
        const float *src = B + (j0 + c) * ldb + k0;
        for (int64_t k = 0; k < kc; k++) d[k * NR + c] = src[k];
      } else {
        for (int64_t k = 0; k < kc; k++) d[k * NR + c] = 0.0f;
      }
    }
  }
}

/* C[mr, nr] = alpha * Ap . Bp + beta * C (beta == 0: C is not read). */
static void gt__micro(int64_t kc, const float *Ap, const float *Bp, float *C, int64_t ldc, int64_t mr,
                      int64_t nr, float alpha, float beta) {
  __m512 c[MR][2];
  for (int r = 0; r < MR; r++) c[r][0] = _mm512_setzero_ps(), c[r][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; k++) {
    __m512 b0 = _mm512_loadu_ps(Bp + k * NR), b1 = _mm512_loadu_ps(Bp + k * NR + 16);
    const float *a = Ap + k * MR;
#define GT__ROW(r)                                   \
  {                                                  \
    __m512 ar = _mm512_set1_ps(a[r]);                \
    c[r][0] = _mm512_fmadd_ps(ar, b0, c[r][0]);      \
    c[r][1] = _mm512_fmadd_ps(ar, b1, c[r][1]);      \
  }
    GT__ROW(0) GT__ROW(1) GT__ROW(2) GT__ROW(3) GT__ROW(4) GT__ROW(5)
    GT__ROW(6) GT__ROW(7) GT__ROW(8) GT__ROW(9) GT__ROW(10) GT__ROW(11)
#undef GT__ROW
  }
  __mmask16 m0 = (__mmask16)(nr >= 16 ? 0xFFFF : (1u << nr) - 1);
  __mmask16 m1 = (__mmask16)(nr >= 32 ? 0xFFFF : nr > 16 ? (1u << (nr - 16)) - 1 : 0);
  __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  for (int64_t r = 0; r < mr; r++) {
    float *cr = C + r * ldc;
    __m512 x0 = _mm512_mul_ps(va, c[r][0]), x1 = _mm512_mul_ps(va, c[r][1]);
    if (beta != 0.0f) {
      x0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, cr), x0);
      x1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, cr + 16), x1);
    }
    _mm512_mask_storeu_ps(cr, m0, x0);
    _mm512_mask_storeu_ps(cr + 16, m1, x1);
  }
}

static int64_t gt__min(int64_t a, int64_t b) { return a < b ? a : b; }

/* C11 aligned_alloc wants the size to be a multiple of the alignment. */
static float *gt__alloc64(int64_t nfloats) {
  size_t bytes = ((size_t)nfloats * sizeof(float) + 127) & ~(size_t)63;
  return aligned_alloc(64, bytes);
}

/* A few rows times B^T (decoding one token: x [1, K] times W [N, K]^T):
 * packing would copy all of W for one use, so each output is a dot product of
 * two contiguous rows instead, memory-bound as it must be. Every output is
 * one thread's fixed-order sum, so the bits do not depend on threads. */
#define GT__GEMV_ROWS 4
static void gt__gemv_bt(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                        int64_t ldb, float beta, float *C, int64_t ldc) {
  int nt = omp_in_parallel() || N * K < (1 << 15) ? 1 : omp_get_max_threads();
  __mmask16 tail = (__mmask16)((1u << (K % 16)) - 1);
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t j = 0; j < N; j++) {
    const float *b = B + j * ldb;
    for (int64_t i = 0; i < M; i++) {
      const float *a = A + i * lda;
      __m512 acc = _mm512_setzero_ps();
      int64_t k = 0;
      for (; k + 16 <= K; k += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), acc);
      if (k < K) acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, a + k), _mm512_maskz_loadu_ps(tail, b + k), acc);
      float dot = alpha * _mm512_reduce_add_ps(acc);
      float *c = C + i * ldc + j;
      *c = beta == 0.0f ? dot : dot + beta * *c;
    }
  }
}

void gt_sgemm(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
              int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0 || alpha == 0.0f) {
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  if (M <= GT__GEMV_ROWS && !transA && transB) {
    gt__gemv_bt(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  int64_t nc_max = gt__min(NC, (N + NR - 1) / NR * NR);
  int64_t kc_max = gt__min(KC, K);
  float *Bp = gt__alloc64(nc_max * kc_max);
  int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
  /* split rows when there are enough of them, else the NR panels of B */
  int split_rows = M >= (int64_t)nt * MR * 2 || nt == 1;
  int64_t mc = gt__min(MC, (M + MR - 1) / MR * MR);
  for (int64_t jc = 0; jc < N; jc += NC) {
    int64_t nc = gt__min(NC, N - jc);
    int64_t npanels = (nc + NR - 1) / NR;
    for (int64_t pc = 0; pc < K; pc += KC) {
      int64_t kc = gt__min(KC, K - pc);
      float bta = pc == 0 ? beta : 1.0f;
#pragma omp parallel num_threads(nt)
      {
#pragma omp for schedule(static)
        for (int64_t q = 0; q < npanels; q++)
          gt__pack_b_panel(Bp + q * NR * kc, transB, B, ldb, pc, kc, jc + q * NR, gt__min(NR, nc - q * NR));
        float *Ap = gt__alloc64(mc * kc);
        if (split_rows) {
          /* each thread owns an equal run of MR panels (balanced to one panel),
           * walked in blocks of at most mc rows */
          int64_t panels = (M + MR - 1) / MR, tid = omp_get_thread_num(), nth = omp_get_num_threads();
          int64_t p0 = panels * tid / nth, p1 = panels * (tid + 1) / nth;
          int64_t row_end = gt__min(M, p1 * MR);
          for (int64_t ic = p0 * MR; ic < row_end; ic += mc) {
            int64_t m = gt__min(mc, row_end - ic);
            gt__pack_a(Ap, transA, A, lda, ic, m, pc, kc);
            for (int64_t q = 0; q < npanels; q++)
              for (int64_t ir = 0; ir < m; ir += MR)
                gt__micro(kc, Ap + ir * kc, Bp + q * NR * kc, C + (ic + ir) * ldc + jc + q * NR, ldc,
                          gt__min(MR, m - ir), gt__min(NR, nc - q * NR), alpha, bta);
          }
        } else {
          for (int64_t ic = 0; ic < M; ic += mc) {
            int64_t m = gt__min(mc, M - ic);
            gt__pack_a(Ap, transA, A, lda, ic, m, pc, kc);
#pragma omp for schedule(static)
            for (int64_t q = 0; q < npanels; q++)
              for (int64_t ir = 0; ir < m; ir += MR)
                gt__micro(kc, Ap + ir * kc, Bp + q * NR * kc, C + (ic + ir) * ldc + jc + q * NR, ldc,
                          gt__min(MR, m - ir), gt__min(NR, nc - q * NR), alpha, bta);
          }
        }
        free(Ap);
      }
    }
  }
  free(Bp);
}

#else /* no AVX-512: OpenBLAS */

void gt_sgemm(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
              int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
              (blasint)M, (blasint)N, (blasint)K, alpha, A, (blasint)lda, B, (blasint)ldb, beta, C,
              (blasint)ldc);
}
#endif
