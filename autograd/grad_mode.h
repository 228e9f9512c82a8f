#pragma once
// The grad-mode guards live in core (core/autograd_meta.h), where core's own code uses them.
#include "core/autograd_meta.h"
