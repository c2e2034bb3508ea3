// Opens cuBLASLt with dlopen on first use (why: cublaslt_library.h).
#include "kernels/cuda/gemm/cublaslt_library.h"

#include <dlfcn.h>

#include <stdexcept>
#include <string>

namespace gpt::cuda {
namespace {

// dlerror()'s text, or a placeholder when it has none.
std::string last_dl_error() {
  const char* text = dlerror();
  return text ? text : "no reason given";
}

// The first of `files` that loads; nullptr and `why` (a line per file tried) when none does.
void* open_library(std::initializer_list<const char*> files, std::string& why) {
  for (const char* name : files) {
    // RTLD_LOCAL: its symbols stay out of the global namespace (nothing else resolves
    // against them); RTLD_NOW: a broken file fails here, not at some later call.
    if (void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return handle;
    why += std::string("\n  ") + name + ": " + last_dl_error();
  }
  return nullptr;
}

// Looks up `name` in the library into `function`, or closes the library and throws
// naming the function.
template <class F>
void resolve(void* library, const char* name, F& function) {
  dlerror();  // clear a stale error: dlsym returning nullptr is not an error by itself
  function = reinterpret_cast<F>(dlsym(library, name));
  if (!function) {
    const std::string why = last_dl_error();
    dlclose(library);
    throw std::runtime_error(std::string("cuBLASLt has no function ") + name + ": " + why +
                             " (a library older than the headers this build used?)");
  }
}

}  // namespace

CublasLt open_cublaslt(std::initializer_list<const char*> files) {
  std::string why;
  void* library = open_library(files, why);
  if (!library)
    throw std::runtime_error(std::string("gemm=cublas needs cuBLASLt, which could not be loaded:") + why +
                             "\n(install the CUDA toolkit's cuBLAS, or add its directory to LD_LIBRARY_PATH; the "
                             "hand-written GEMMs, gemm=hand or v1..v5, do not need it)");
  CublasLt lt{};
#define GPT_RESOLVE(name) resolve(library, #name, lt.name)
  GPT_RESOLVE(cublasLtCreate);
  GPT_RESOLVE(cublasLtDestroy);
  GPT_RESOLVE(cublasLtGetStatusName);
  GPT_RESOLVE(cublasLtGetStatusString);
  GPT_RESOLVE(cublasLtMatmul);
  GPT_RESOLVE(cublasLtMatmulAlgoGetHeuristic);
  GPT_RESOLVE(cublasLtMatmulDescCreate);
  GPT_RESOLVE(cublasLtMatmulDescDestroy);
  GPT_RESOLVE(cublasLtMatmulDescSetAttribute);
  GPT_RESOLVE(cublasLtMatmulPreferenceCreate);
  GPT_RESOLVE(cublasLtMatmulPreferenceDestroy);
  GPT_RESOLVE(cublasLtMatmulPreferenceSetAttribute);
  GPT_RESOLVE(cublasLtMatrixLayoutCreate);
  GPT_RESOLVE(cublasLtMatrixLayoutDestroy);
#undef GPT_RESOLVE
  return lt;  // the library stays open: its functions are called until the process ends
}

const CublasLt& cublaslt() {
  // The toolkit's own file first, then the soname by the loader's search. A throw leaves
  // `lt` unset: the next call tries again.
  static const CublasLt lt = open_cublaslt({GPT_CUBLASLT_PATH, GPT_CUBLASLT_SONAME});
  return lt;
}

}  // namespace gpt::cuda
