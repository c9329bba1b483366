/* Compile a region of a file for AVX-512 whatever -march says: GCC's
 * push_options / target pragmas, or clang's attribute push (the libFuzzer
 * build is clang's, which ignores GCC's target pragmas). Callers check the
 * CPU before they enter such code. */
#ifndef GEMTRAIN_KERNELS_TARGET_H
#define GEMTRAIN_KERNELS_TARGET_H

#if defined(__clang__)
#define GT__TARGET_BEGIN(isa) _Pragma(GT__TARGET_STR(clang attribute push(__attribute__((target(isa))), apply_to = function)))
#define GT__TARGET_END _Pragma("clang attribute pop")
#else
#define GT__TARGET_BEGIN(isa) _Pragma("GCC push_options") _Pragma(GT__TARGET_STR(GCC target(isa)))
#define GT__TARGET_END _Pragma("GCC pop_options")
#endif
#define GT__TARGET_STR(x) #x

#endif
