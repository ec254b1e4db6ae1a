// Catch2 v2 (Debian's 2.13) and v3 (newer distributions) behind one include.
#pragma once

#if __has_include(<catch2/catch_test_macros.hpp>)
#include <catch2/catch_test_macros.hpp>
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/catch_session.hpp>
#define PURLIN_CATCH_V3 1
#else
#include <catch2/catch.hpp>
#endif
