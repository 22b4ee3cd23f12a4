// The one place that includes xtensor: an xtensor upgrade (0.25 moved the
// headers into subfolders) touches this file only.
#pragma once

#include <xtensor/xadapt.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>
