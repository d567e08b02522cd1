#include "nn/llama/llama.h"
