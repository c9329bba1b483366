/* Which compiled copy of the kernels runs (docs/cpus.md). Every kernel file
 * with vector code is compiled three times: for baseline x86-64 (the
 * portable path: OpenBLAS for the float32 products, plain C loops
 * elsewhere), for AVX2 with FMA (the same loops 8 floats wide, and a packed
 * float32 GEMM of our own) and for AVX-512 (F, BW, VL, DQ and FMA), its
 * entry points renamed by kernels/isa.h; kernels/dispatch.c sends each
 * public kernel to one of them. Private to kernels/ and the tests. */
#ifndef GEMTRAIN_KERNELS_CPU_H
#define GEMTRAIN_KERNELS_CPU_H

/* The copy that runs: AVX-512 where the CPU (and the OS, which must save
 * the registers) has AVX-512 F, BW, VL, DQ and FMA; else AVX2 where it has
 * AVX2 and FMA; else portable. The test-only environment variable
 * GT_TEST_KERNELS=portable or =avx2 picks a lesser copy. Decided at the
 * first call, the same for the rest of the process. */
enum { GT__PATH_PORTABLE = 1, GT__PATH_AVX512 = 2, GT__PATH_AVX2 = 3 };
int gt__kernels_path(void);
/* gt__kernels_path() == GT__PATH_AVX512 */
int gt__kernels_avx512(void);

/* "avx512", "avx2" or "portable": gt__kernels_path() by name, for logs. */
const char *gt__kernels_name(void);

/* The CPU's vendor string ("GenuineIntel", "AuthenticAMD"; "" where
 * cpuid is missing) and its family and model as /proc/cpuinfo shows them
 * (the extended fields folded in). */
void gt__cpu_ident(char vendor[13], int *family, int *model);

/* 1 when AMX-BF16 tiles may run in this process: cpuid has AMX-TILE and
 * AMX-BF16, XCR0 says the OS saves the tile state, and (Linux) the process
 * was granted the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM,
 * XFEATURE_XTILEDATA, asked once here); 0 otherwise and with
 * GT_TEST_KERNELS=portable. */
int gt__cpu_amx_bf16(void);

#endif
