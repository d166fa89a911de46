/* cuda.h (tests/gpu/cuda_emu): the emulator has no driver API; the runtime's
 * header is all there is. */
#include "cuda_runtime.h"
