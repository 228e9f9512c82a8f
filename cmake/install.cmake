# What `cmake --install` puts under the prefix:
#   include/flow/            the headers, in the layout sources include them ("core/flow.h",
#                            "nn/modules.h", "graph/graph.h"), with the generated job/job.pb.h
#                            and job/export.pb.h that job/job.h and graph/export.h include
#   lib/                     the shared libraries (RUNPATH $ORIGIN)
#   lib/cmake/flow/          flowConfig.cmake, flowConfigVersion.cmake and the exported targets
#                            flow::core, flow::autograd, ... and the umbrella flow::flow
#   lib/pkgconfig/flow.pc    the same for pkg-config
#   bin/                     flow_run, oneflow_lite_run, flow_serve and the other tools
include(CMakePackageConfigHelpers)

# The libraries a program may link, exported as flow::<name>. The *_proto libraries hold
# generated protobuf code the others link; distributed_proto's headers stay private.
set(flow_exported_libraries openmp_start openmp_env core autograd nn optim data job_proto job graph fx models distributed_proto distributed)
if(TARGET flow_onnx)
  list(APPEND flow_exported_libraries onnx_proto onnx)
endif()
set(flow_exported_targets oneflow_lite)
foreach(name IN LISTS flow_exported_libraries)
  set_target_properties(flow_${name} PROPERTIES EXPORT_NAME ${name})
  add_library(flow::${name} ALIAS flow_${name})
  list(APPEND flow_exported_targets flow_${name})
endforeach()
add_library(flow::oneflow_lite ALIAS oneflow_lite)

# flow::flow: everything a training program uses (tensors, autograd, modules, optimizers, data,
# nn::Graph, fx, the model zoo, distributed training) and the oneflow_lite runtime.
add_library(flow INTERFACE)
target_link_libraries(flow INTERFACE flow_graph flow_fx flow_models flow_data flow_distributed oneflow_lite)
add_library(flow::flow ALIAS flow)
list(APPEND flow_exported_targets flow)

install(TARGETS ${flow_exported_targets} EXPORT flowTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# The programs, and the libraries only they link (no headers: they are not an API yet).
set(flow_programs flow_run oneflow_lite_run flow_plan_stats flow_trace_diff flow_serve flow_client flow_loadgen)
if(TARGET flow_onnx_export)
  list(APPEND flow_programs flow_onnx_export)
endif()
install(TARGETS ${flow_programs} flow_trace_diff_lib flow_serving flow_serving_proto flow_serving_client
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Headers. Left out: the CUDA kernels' and the few that include a private dependency's headers
# (oneDNN, Gloo, gRPC, NCCL); no other installed header includes them.
set(flow_header_dirs core autograd nn optim data job graph fx models distributed oneflow_lite)
list(TRANSFORM flow_header_dirs PREPEND ${PROJECT_SOURCE_DIR}/)
# (Names of files and directories: none is used twice in these directories.)
set(flow_private_headers cuda dnnl_util.h blocked_layout_steps.h blocked_layout_kernel.h gloo_process_group.h gloo_reduce.h nccl_process_group.h store_client.h store_server.h)
if(NOT TARGET flow_onnx)
  list(APPEND flow_private_headers onnx)
endif()
set(flow_header_excludes)
foreach(name IN LISTS flow_private_headers)
  list(APPEND flow_header_excludes PATTERN ${name} EXCLUDE)
endforeach()
install(DIRECTORY ${flow_header_dirs} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/flow
        FILES_MATCHING PATTERN "*.h" ${flow_header_excludes})
# job/job.h includes the generated job/job.pb.h: installed with it, so a program needs
# protobuf's headers (flowConfig.cmake finds Protobuf; flow.pc requires protobuf).
install(FILES ${PROJECT_BINARY_DIR}/job/job.pb.h ${PROJECT_BINARY_DIR}/job/export.pb.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/flow/job)
if(TARGET flow_onnx)
  install(FILES ${PROJECT_BINARY_DIR}/graph/onnx/onnx.pb.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/flow/graph/onnx)
endif()

# The CMake package: find_package(flow) in a project whose CMAKE_PREFIX_PATH has the prefix.
set(flow_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/flow)
install(EXPORT flowTargets NAMESPACE flow:: DESTINATION ${flow_cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/flowConfig.cmake.in ${PROJECT_BINARY_DIR}/flowConfig.cmake
                              INSTALL_DESTINATION ${flow_cmake_dir})
# 0.x: a minor version may break the API, so only the same major.minor is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/flowConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/flowConfig.cmake ${PROJECT_BINARY_DIR}/flowConfigVersion.cmake DESTINATION ${flow_cmake_dir})

# pkg-config: paths relative to the .pc file's directory, so `cmake --install --prefix` anywhere
# (and moving the tree afterwards) keeps it right.
file(RELATIVE_PATH flow_pc_to_prefix ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" flow_pc_to_prefix ${flow_pc_to_prefix})
set(flow_pc_cflags "")
if(FLOW_CUDA_ENABLED)
  set(flow_pc_cflags " -DFLOW_WITH_CUDA=1")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/flow.pc.in ${PROJECT_BINARY_DIR}/flow.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/flow.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
