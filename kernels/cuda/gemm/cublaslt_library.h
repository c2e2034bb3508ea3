/// @file
/// cuBLASLt, opened when first used instead of linked into every program.
///
/// Why: libcublasLt is a 540 MB library whose static initialisers run at the start of
/// every process that links it, GPU or no GPU. Measured on the CPU machine with
/// `perf stat -e page-faults,task-clock build/stages/01_single_gpu/train --help`: linked,
/// 25,710 page faults and 100 ms of CPU time; opened on use, 378 and 5 ms. Nearly every
/// process this project starts is a CPU rank that never calls cuBLAS, and the test suite
/// starts thousands (its comparisons of whole runs took a quarter less time without it).
/// So only gemm=cublas on a GPU opens it, with dlopen, and calls it through the table below.
///
/// Which file: the one of the toolkit this build compiled against (its headers define the
/// types used here), GPT_CUBLASLT_PATH, set by kernels/cuda/CMakeLists.txt; where that file
/// is missing (a program copied to another machine), the library's soname through the
/// dynamic loader's usual search (LD_LIBRARY_PATH, the program's RUNPATH, ld.so.cache).
#pragma once

#include <cublasLt.h>

#include <initializer_list>

namespace gpt::cuda {

/// The cuBLASLt functions gemm_cublas.cu calls, each named as in NVIDIA's API and
/// found in the library by that name.
struct CublasLt {
  decltype(&::cublasLtCreate) cublasLtCreate;  ///< opens a handle
  decltype(&::cublasLtDestroy) cublasLtDestroy;  ///< closes one
  decltype(&::cublasLtGetStatusName) cublasLtGetStatusName;  ///< a status's enum name
  decltype(&::cublasLtGetStatusString) cublasLtGetStatusString;  ///< a status in words
  decltype(&::cublasLtMatmul) cublasLtMatmul;  ///< D = alpha op(A) op(B) + beta C, and its epilogue
  decltype(&::cublasLtMatmulAlgoGetHeuristic) cublasLtMatmulAlgoGetHeuristic;  ///< the best algorithms for a product
  decltype(&::cublasLtMatmulDescCreate) cublasLtMatmulDescCreate;  ///< a product's description
  decltype(&::cublasLtMatmulDescDestroy) cublasLtMatmulDescDestroy;  ///< frees one
  decltype(&::cublasLtMatmulDescSetAttribute) cublasLtMatmulDescSetAttribute;  ///< sets one of its attributes
  decltype(&::cublasLtMatmulPreferenceCreate) cublasLtMatmulPreferenceCreate;  ///< the heuristic's limits
  decltype(&::cublasLtMatmulPreferenceDestroy) cublasLtMatmulPreferenceDestroy;  ///< frees them
  decltype(&::cublasLtMatmulPreferenceSetAttribute) cublasLtMatmulPreferenceSetAttribute;  ///< sets one
  decltype(&::cublasLtMatrixLayoutCreate) cublasLtMatrixLayoutCreate;  ///< a matrix's type, shape and stride
  decltype(&::cublasLtMatrixLayoutDestroy) cublasLtMatrixLayoutDestroy;  ///< frees one
};

/// The library, opened on the first call (thread-safe) and kept open until the process
/// ends: open_cublaslt({GPT_CUBLASLT_PATH, GPT_CUBLASLT_SONAME}).
const CublasLt& cublaslt();

/// Opens the first of `files` (paths, or names for the dynamic loader's search) that
/// loads, and looks up every function of CublasLt in it. Throws std::runtime_error
/// naming each file tried and why it did not load, or the function the library lacks.
CublasLt open_cublaslt(std::initializer_list<const char*> files);

}  // namespace gpt::cuda
