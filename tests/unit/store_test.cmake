add_executable(store_test ${CMAKE_CURRENT_LIST_DIR}/store_test.cc)
target_link_libraries(store_test PRIVATE hixl_internal GTest::gtest_main fmt::fmt Threads::Threads)
target_include_directories(store_test PRIVATE ${PROJECT_SOURCE_DIR}/src)
gtest_discover_tests(store_test DISCOVERY_TIMEOUT 30 PROPERTIES TIMEOUT 60 LABELS tsan)
