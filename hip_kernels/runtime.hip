// runtime.hip: the two host helpers the Python loader needs beside the kernels.
//   ss_error_name(code)  -> the runtime's name for an error code (used by library.check()).
//   ss_warp_size()       -> the current device's warp/wave width, or -error code.
// Build and check: see hip_kernels/README.md (python -m hip_kernels.build --check).
#include "portability.h"

extern "C" const char* ss_error_name(int code) {
  return ss_get_error_name(static_cast<ss_error_t>(code));
}

extern "C" int ss_warp_size() {
  int width = 0;
  ss_error_t err = ss_host_warp_size(&width);
  return err == ss_success ? width : -static_cast<int>(err);
}
