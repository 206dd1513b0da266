// enum_raw.h — read a C enum value that came from a caller without loading it as the enum type.
// C callers may pass any int in an enum field; in C++ loading an out-of-range value through the
// enum type is undefined (UBSan's -fsanitize=enum flags it), so range checks read the bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace fattn {

template <class E>
int64_t raw_enum(const E &e) {
    static_assert(std::is_enum<E>::value, "raw_enum reads enums");
    typename std::underlying_type<E>::type v;
    std::memcpy(&v, &e, sizeof v);
    return int64_t(v);
}

}  // namespace fattn
