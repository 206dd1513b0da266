// expect_fail.h — EXPECT_FAIL(call, status, substr, obj): `call` returns `status` and obj.err()
// (the context's last error message) contains `substr`; both printed when it does not.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "fattn/fattn.h"

#define EXPECT_FAIL(call, status, substr, obj)                                                 \
    do {                                                                                       \
        const fattn_status s_ = (call);                                                        \
        EXPECT_EQ(s_, status) << fattn_status_string(s_) << ": " << (obj).err();              \
        EXPECT_NE((obj).err().find(substr), std::string::npos) << "message: " << (obj).err(); \
    } while (0)
