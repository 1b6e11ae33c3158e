// stb's implementation for builds without a compiled libstb: exactly one translation unit
// defines TTMOE_STB_IMPLEMENTATION before including the image header.
#define TTMOE_STB_IMPLEMENTATION
#include "ttmoe/io/image.hpp"
