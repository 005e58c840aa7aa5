add_executable(auth_test ${CMAKE_CURRENT_LIST_DIR}/auth_test.cc)
target_link_libraries(auth_test PRIVATE hixl_internal GTest::gtest_main fmt::fmt Threads::Threads)
target_include_directories(auth_test PRIVATE ${PROJECT_SOURCE_DIR}/src)
gtest_discover_tests(auth_test DISCOVERY_TIMEOUT 30 PROPERTIES TIMEOUT 60 LABELS tsan)
