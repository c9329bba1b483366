/* Included first by every kernel file that is compiled three times
 * (CMakeLists.txt, GT_ISA_KERNELS): renames the public kernels it defines to
 * name__portable in the baseline x86-64 build of the file, to name__avx2 in
 * its AVX2 copy (compiled with GT__KERNELS_AVX2 defined and -mavx2 -mfma
 * -fno-trapping-math)
 * and to name__avx512 in its AVX-512 copy (GT__KERNELS_AVX512 and the
 * AVX-512 flags), so all three link into one library; kernels/dispatch.c
 * defines the public names and calls one copy. Every other global symbol of
 * such a file must be left out of its AVX2 and AVX-512 copies (as gemm.c's
 * shared driver, GT__KERNELS_PORTABLE_COPY) or listed here: a duplicate
 * fails the link of the shared library. A kernel added to one of these files
 * goes here and into kernels/dispatch.c. */
#ifndef GEMTRAIN_KERNELS_ISA_H
#define GEMTRAIN_KERNELS_ISA_H

#if defined(GT__KERNELS_AVX512)
#define GT__ISA_NAME(n) GT__ISA_CAT(n, __avx512)
#elif defined(GT__KERNELS_AVX2)
#define GT__ISA_NAME(n) GT__ISA_CAT(n, __avx2)
#else
#define GT__ISA_NAME(n) GT__ISA_CAT(n, __portable)
/* the copy that also holds a file's code shared by all three */
#define GT__KERNELS_PORTABLE_COPY 1
#endif
#define GT__ISA_CAT(a, b) GT__ISA_CAT2(a, b)
#define GT__ISA_CAT2(a, b) a##b

#define gt_sgemm GT__ISA_NAME(gt_sgemm)
#define gt_fma_peak_gflops GT__ISA_NAME(gt_fma_peak_gflops)
#define gt__sgemm_kernel_gflops GT__ISA_NAME(gt__sgemm_kernel_gflops)
#define gt_bf16_peak_gflops GT__ISA_NAME(gt_bf16_peak_gflops)
#define gt_rmsnorm_forward GT__ISA_NAME(gt_rmsnorm_forward)
#define gt_rmsnorm_backward GT__ISA_NAME(gt_rmsnorm_backward)
#define gt_rmsnorm_residual_forward GT__ISA_NAME(gt_rmsnorm_residual_forward)
#define gt_rmsnorm_residual_backward GT__ISA_NAME(gt_rmsnorm_residual_backward)
#define gt_rope_table_fill GT__ISA_NAME(gt_rope_table_fill)
#define gt_rope_forward GT__ISA_NAME(gt_rope_forward)
#define gt_rope_backward GT__ISA_NAME(gt_rope_backward)
#define gt_attention_forward GT__ISA_NAME(gt_attention_forward)
#define gt_attention_backward GT__ISA_NAME(gt_attention_backward)
#define gt_attention_decode GT__ISA_NAME(gt_attention_decode)
#define gt_geglu_forward GT__ISA_NAME(gt_geglu_forward)
#define gt_geglu_backward GT__ISA_NAME(gt_geglu_backward)
#define gt_geglu_backward_write GT__ISA_NAME(gt_geglu_backward_write)
#define gt_rmsnorm_forward_rnd GT__ISA_NAME(gt_rmsnorm_forward_rnd)
#define gt_rmsnorm_rope_forward GT__ISA_NAME(gt_rmsnorm_rope_forward)
#define gt_rope_rmsnorm_backward GT__ISA_NAME(gt_rope_rmsnorm_backward)
#define gt_rmsnorm_residual_forward_rnd GT__ISA_NAME(gt_rmsnorm_residual_forward_rnd)
#define gt_geglu_forward_rnd GT__ISA_NAME(gt_geglu_forward_rnd)
#define gt_geglu_forward_pack GT__ISA_NAME(gt_geglu_forward_pack)
#define gt_geglu_backward_write_b16 GT__ISA_NAME(gt_geglu_backward_write_b16)
#define gt_geglu_forward_b16 GT__ISA_NAME(gt_geglu_forward_b16)
#define gt_geglu_backward_b16_to_b16 GT__ISA_NAME(gt_geglu_backward_b16_to_b16)
#define gt_rmsnorm_forward_pack GT__ISA_NAME(gt_rmsnorm_forward_pack)
#define gt_rmsnorm_residual_forward_pack GT__ISA_NAME(gt_rmsnorm_residual_forward_pack)
#define gt_rmsnorm_backward_b16 GT__ISA_NAME(gt_rmsnorm_backward_b16)
#define gt_rmsnorm_residual_backward_b16 GT__ISA_NAME(gt_rmsnorm_residual_backward_b16)
#define gt_rmsnorm_rope_forward_pack GT__ISA_NAME(gt_rmsnorm_rope_forward_pack)
#define gt_rope_rmsnorm_backward_b16 GT__ISA_NAME(gt_rope_rmsnorm_backward_b16)
#define gt_embedding_forward GT__ISA_NAME(gt_embedding_forward)
#define gt_embedding_backward GT__ISA_NAME(gt_embedding_backward)
#define gt_xent_forward GT__ISA_NAME(gt_xent_forward)
#define gt_xent_backward GT__ISA_NAME(gt_xent_backward)
#define gt_xent_backward_b16 GT__ISA_NAME(gt_xent_backward_b16)
#define gt_softcap_xent_backward_b16 GT__ISA_NAME(gt_softcap_xent_backward_b16)
#define gt_softcap_forward GT__ISA_NAME(gt_softcap_forward)
#define gt_softcap_backward GT__ISA_NAME(gt_softcap_backward)
#define gt_softcap_xent_forward GT__ISA_NAME(gt_softcap_xent_forward)
#define gt_softcap_xent_backward GT__ISA_NAME(gt_softcap_xent_backward)
#define gt_adamw_update GT__ISA_NAME(gt_adamw_update)
#define gt_adamw_update_mu_bf16 GT__ISA_NAME(gt_adamw_update_mu_bf16)
#define gt_sumsq GT__ISA_NAME(gt_sumsq)
#define gt_dot GT__ISA_NAME(gt_dot)
#define gt_scale_forward GT__ISA_NAME(gt_scale_forward)
#define gt_scale_backward GT__ISA_NAME(gt_scale_backward)
#define gt_dropout_threshold GT__ISA_NAME(gt_dropout_threshold)
#define gt_dropout_mask GT__ISA_NAME(gt_dropout_mask)
#define gt_dropout_apply GT__ISA_NAME(gt_dropout_apply)
#define gt_dropout_apply16 GT__ISA_NAME(gt_dropout_apply16)
#define gt_dropout_undo GT__ISA_NAME(gt_dropout_undo)
#define gt_bf16_round GT__ISA_NAME(gt_bf16_round)
#define gt_bf16_pack GT__ISA_NAME(gt_bf16_pack)
#define gt_bf16_round_copy GT__ISA_NAME(gt_bf16_round_copy)
#define gt_bf16_unpack GT__ISA_NAME(gt_bf16_unpack)
#define gt_bf16_round_rows GT__ISA_NAME(gt_bf16_round_rows)
#define gt_bf16_pack_rows GT__ISA_NAME(gt_bf16_pack_rows)

#endif
