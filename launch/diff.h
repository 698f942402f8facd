// Unified diff of two texts (line based, 3 lines of context), as `diff -u` prints it.
#pragma once
#include <string>

namespace moe {

// Empty when the texts are equal.
std::string unified_diff(const std::string& old_text, const std::string& new_text, const std::string& old_label, const std::string& new_label);

}  // namespace moe
