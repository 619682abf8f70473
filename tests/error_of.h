// Tests: the message of the exception a call throws, for checking what an error says.
#pragma once

#include <string>

namespace tf::test {

// The what() of the E that `fn` throws; "(another exception)" when it throws something else and
// "(no exception)" when it returns, so that a search for the expected text fails in both cases.
template <class E, class F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (...) {
    return "(another exception)";
  }
  return "(no exception)";
}

}  // namespace tf::test
