// Pinocchio's constraintDynamics in compiled code: the C++ peer of benchmarks/closed_loop.py.
//
// Built at benchmark time by benchmarks/pinocchio_cpp.py (header-only Pinocchio, -O3
// -march=native -DNDEBUG -fopenmp). The model comes from a small text file written by that
// driver from the Python Pinocchio model (joints, placements, inertias, point constraints), so
// the C++ and the Python calls solve the very same model.
//
//   pinocchio_peer bench MODEL STATES QDD_OUT REPEATS THREADS ACCURACY MU MAX_ITER
//     constraintDynamics over every state of STATES (binary: int64 B, int64 nq, then q as
//     B x nq, qd and tau as B x nv float64, row-major), REPEATS times, on THREADS OpenMP threads (each with
//     its own Data and its share of the batch, timed from a common barrier to the last thread
//     done); writes the accelerations (B x n float64) to QDD_OUT and one JSON line to stdout.
//
//   pinocchio_peer simulate MODEL X0 T1 RTOL ATOL KP KD DT0 SAVES REPEATS ACCURACY MU MAX_ITER
//     TRAJ_OUT
//     Free motion (tau = 0) from X0 (binary: int64 2n, then q, qd) to T1 with Boost.Odeint's
//     Dormand-Prince 5(4) (controlled, dense output at SAVES equally spaced times from 0 to T1),
//     Baumgarte gains KP, KD on every constraint; writes the saved states (SAVES x 2n float64)
//     to TRAJ_OUT and one JSON line (steps, evaluations, wall times, loop residuals) to stdout.
//
//   $PEER_CPUS (e.g. "0,1"): run on those CPUs, bench's threads each pinned to one of them.
//
// Eigen's own OpenMP matrix products are off: the peer runs its states in parallel, not one
// product. Left on, a product of the 32-loop ladder's size inside bench's one-thread region
// (an inactive one, to OpenMP) started Eigen's threads on that thread's one pinned CPU, and
// their spinning barriers made constraintDynamics 80x slower (12 ms instead of 0.14 ms).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <pinocchio/algorithm/constrained-dynamics.hpp>
#include <pinocchio/algorithm/kinematics.hpp>
#include <pinocchio/multibody.hpp>

#include <boost/numeric/odeint/integrate/integrate_times.hpp>
#include <boost/numeric/odeint/stepper/generation.hpp>
#include <boost/numeric/odeint/stepper/runge_kutta_dopri5.hpp>

#ifdef _OPENMP
#include <omp.h>
#endif
#include <sched.h>

namespace pin = pinocchio;
namespace odeint = boost::numeric::odeint;

using Model = pin::Model;
using Data = pin::Data;
using ConstraintModels =
  std::vector<pin::RigidConstraintModel, Eigen::aligned_allocator<pin::RigidConstraintModel>>;
using ConstraintDatas =
  std::vector<pin::RigidConstraintData, Eigen::aligned_allocator<pin::RigidConstraintData>>;
using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
using Clock = std::chrono::steady_clock;

namespace
{

  struct Problem
  {
    Model model;
    ConstraintModels constraints;
  };

  pin::SE3 read_placement(std::istream & in)
  {
    Eigen::Matrix3d rotation;
    Eigen::Vector3d translation;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j)
        in >> rotation(i, j);
    in >> translation[0] >> translation[1] >> translation[2];
    return pin::SE3(rotation, translation);
  }

  Eigen::Vector3d read_vector(std::istream & in)
  {
    Eigen::Vector3d v;
    in >> v[0] >> v[1] >> v[2];
    return v;
  }

  pin::JointModel make_joint(const std::string & kind, std::istream & in)
  {
    if (kind == "RX")
      return pin::JointModelRX();
    if (kind == "RY")
      return pin::JointModelRY();
    if (kind == "RZ")
      return pin::JointModelRZ();
    if (kind == "PX")
      return pin::JointModelPX();
    if (kind == "PY")
      return pin::JointModelPY();
    if (kind == "PZ")
      return pin::JointModelPZ();
    if (kind == "RU")
      return pin::JointModelRevoluteUnaligned(read_vector(in));
    if (kind == "PU")
      return pin::JointModelPrismaticUnaligned(read_vector(in));
    if (kind == "FF")
      return pin::JointModelFreeFlyer();
    if (kind == "SPH")
      return pin::JointModelSpherical();
    throw std::runtime_error("unknown joint kind " + kind);
  }

  // Text, whitespace separated:
  //   gravity gx gy gz
  //   joint PARENT KIND [axis] placement(R row-major, p) mass lever(3) inertia(3x3 row-major)
  //   constraint 3D|6D JOINT1 placement1 JOINT2 placement2
  //   armature a(nv)    (optional; after the joints)
  Problem read_problem(const std::string & path)
  {
    std::ifstream in(path);
    if (!in)
      throw std::runtime_error("cannot read " + path);
    Problem problem;
    Model & model = problem.model;
    std::vector<std::tuple<std::string, std::size_t, pin::SE3, std::size_t, pin::SE3>> pending;
    std::string tag;
    while (in >> tag)
    {
      if (tag == "gravity")
        model.gravity.linear(read_vector(in));
      else if (tag == "joint")
      {
        std::size_t parent;
        std::string kind;
        in >> parent >> kind;
        const pin::JointModel joint = make_joint(kind, in);
        const pin::SE3 placement = read_placement(in);
        double mass;
        in >> mass;
        const Eigen::Vector3d lever = read_vector(in);
        Eigen::Matrix3d inertia;
        for (int i = 0; i < 3; ++i)
          for (int j = 0; j < 3; ++j)
            in >> inertia(i, j);
        const auto id =
          model.addJoint(parent, joint, placement, "j" + std::to_string(model.njoints));
        model.appendBodyToJoint(id, pin::Inertia(mass, lever, inertia), pin::SE3::Identity());
      }
      else if (tag == "armature")
      {
        model.armature.resize(model.nv);
        for (Eigen::Index i = 0; i < model.nv; ++i)
          in >> model.armature[i];
      }
      else if (tag == "constraint")
      {
        std::string kind;
        std::size_t joint1, joint2;
        in >> kind >> joint1;
        const pin::SE3 placement1 = read_placement(in);
        in >> joint2;
        const pin::SE3 placement2 = read_placement(in);
        pending.emplace_back(kind, joint1, placement1, joint2, placement2);
      }
      else
        throw std::runtime_error("unknown entry " + tag + " in " + path);
    }
    for (const auto & [kind, joint1, placement1, joint2, placement2] : pending)
      problem.constraints.emplace_back(
        kind == "6D" ? pin::CONTACT_6D : pin::CONTACT_3D, model, joint1, placement1, joint2,
        placement2, pin::LOCAL);
    return problem;
  }

  std::vector<double> read_doubles(const std::string & path, std::vector<std::int64_t> & header,
                                   std::size_t header_size)
  {
    std::ifstream in(path, std::ios::binary);
    if (!in)
      throw std::runtime_error("cannot read " + path);
    header.resize(header_size);
    in.read(reinterpret_cast<char *>(header.data()), header_size * sizeof(std::int64_t));
    std::vector<double> values;
    double x;
    while (in.read(reinterpret_cast<char *>(&x), sizeof x))
      values.push_back(x);
    return values;
  }

  void write_doubles(const std::string & path, const double * data, std::size_t size)
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char *>(data), size * sizeof(double));
    if (!out)
      throw std::runtime_error("cannot write " + path);
  }

  double median(std::vector<double> values)
  {
    std::sort(values.begin(), values.end());
    const std::size_t n = values.size();
    return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
  }

  std::string json_list(const std::vector<double> & values)
  {
    std::string out = "[";
    char buffer[32];
    for (std::size_t i = 0; i < values.size(); ++i)
    {
      std::snprintf(buffer, sizeof buffer, "%s%.9g", i ? ", " : "", values[i]);
      out += buffer;
    }
    return out + "]";
  }

  // $PEER_CPUS (e.g. "0,1"): the CPUs to run on
  std::vector<int> cpus_from_environment()
  {
    std::vector<int> cpus;
    const char * text = std::getenv("PEER_CPUS");
    for (const char * c = text ? text : ""; *c;)
    {
      char * end;
      cpus.push_back(int(std::strtol(c, &end, 10)));
      c = *end ? end + 1 : end;
    }
    return cpus;
  }

  // Pin the calling thread (and the threads it starts later) to ``cpus`` (all when empty).
  void pin_to_cpus(const std::vector<int> & cpus)
  {
    if (cpus.empty())
      return;
    cpu_set_t set;
    CPU_ZERO(&set);
    for (const int c : cpus)
      CPU_SET(c, &set);
    if (sched_setaffinity(0, sizeof set, &set))
      throw std::runtime_error("sched_setaffinity failed for PEER_CPUS");
  }

  ConstraintDatas make_datas(const ConstraintModels & constraints)
  {
    ConstraintDatas datas;
    for (const auto & c : constraints)
      datas.push_back(c.createData());
    return datas;
  }

  // ------------------------------------------------------------------------------- bench

  int bench(char ** argv)
  {
    const Problem problem = read_problem(argv[0]);
    std::vector<std::int64_t> header;
    const std::vector<double> values = read_doubles(argv[1], header, 2);
    const std::string qdd_path = argv[2];
    const int repeats = std::stoi(argv[3]);
    const int threads = std::stoi(argv[4]);
    const double accuracy = std::stod(argv[5]), mu = std::stod(argv[6]);
    const int max_iter = std::stoi(argv[7]);
    // q rows have nq entries (a free flyer's or spherical joint's quaternion), qd and tau nv
    const Eigen::Index batch = header[0], nq = header[1], n = problem.model.nv;
    if (nq != problem.model.nq || values.size() != std::size_t(batch * (nq + 2 * n)))
      throw std::runtime_error("states do not match the model");
    // column k of each matrix is state k (the file is row-major B x nq, then B x nv twice)
    const Eigen::Map<const Matrix> q(values.data(), nq, batch);
    const Eigen::Map<const Matrix> qd(values.data() + batch * nq, n, batch);
    const Eigen::Map<const Matrix> tau(values.data() + batch * (nq + n), n, batch);
    Matrix qdd(n, batch);
    std::vector<double> times(repeats);
    int max_iterations = 0;

#pragma omp parallel num_threads(threads) reduction(max : max_iterations)
    {
      int rank = 0, size = 1;
#ifdef _OPENMP
      rank = omp_get_thread_num();
      size = omp_get_num_threads();
#endif
      const std::vector<int> cpus = cpus_from_environment();
      if (!cpus.empty()) // one thread per CPU
        pin_to_cpus({cpus[std::size_t(rank) % cpus.size()]});
      Data data(problem.model);
      ConstraintDatas datas = make_datas(problem.constraints);
      pin::ProximalSettings settings(accuracy, mu, max_iter);
      pin::initConstraintDynamics(problem.model, data, problem.constraints, datas);
      const Eigen::Index begin = batch * rank / size, end = batch * (rank + 1) / size;
      auto pass = [&](bool store) {
        for (Eigen::Index k = begin; k < end; ++k)
        {
          const auto & a = pin::constraintDynamics(
            problem.model, data, q.col(k), qd.col(k), tau.col(k), problem.constraints, datas,
            settings);
          if (store)
          {
            qdd.col(k) = a;
            max_iterations = std::max(max_iterations, settings.iter);
          }
        }
      };
      pass(true); // warm up, and the accelerations
      for (int r = 0; r < repeats; ++r)
      {
        Clock::time_point start;
#pragma omp barrier
#pragma omp master
        start = Clock::now();
        pass(false);
#pragma omp barrier
#pragma omp master
        times[r] = std::chrono::duration<double>(Clock::now() - start).count();
      }
    }
    // row-major B x n out: column-major n x B is the same bytes
    write_doubles(qdd_path, qdd.data(), std::size_t(n * batch));
    std::printf(
      "{\"threads\": %d, \"batch\": %ld, \"repeats\": %d, \"per_state_s\": %.9g, "
      "\"max_iterations\": %d, \"times_s\": %s}\n",
      threads, long(batch), repeats, median(times) / double(batch), max_iterations,
      json_list(times).c_str());
    return 0;
  }

  // ---------------------------------------------------------------------------- simulate

  using State = std::vector<double>;

  // Position and velocity residuals of the point constraints, |Phi| and |Phi'| (2-norms over
  // all rows), at (q, qd): the constraint points' world positions and velocities.
  std::pair<double, double> loop_residual(
    const Problem & problem, Data & data, const Eigen::VectorXd & q, const Eigen::VectorXd & qd)
  {
    pin::forwardKinematics(problem.model, data, q, qd);
    double position = 0.0, velocity = 0.0;
    for (const auto & c : problem.constraints)
    {
      Eigen::Vector3d p[2], v[2];
      const std::size_t joints[2] = {c.joint1_id, c.joint2_id};
      const pin::SE3 placements[2] = {c.joint1_placement, c.joint2_placement};
      for (int s = 0; s < 2; ++s)
      {
        const pin::SE3 frame = data.oMi[joints[s]] * placements[s];
        p[s] = frame.translation();
        // velocity of the point, world axes: the joint's spatial velocity moved to the point
        const pin::Motion local = placements[s].actInv(data.v[joints[s]]);
        v[s] = frame.rotation() * local.linear();
      }
      position += (p[0] - p[1]).squaredNorm();
      velocity += (v[0] - v[1]).squaredNorm();
    }
    return {std::sqrt(position), std::sqrt(velocity)};
  }

  int simulate(char ** argv)
  {
    Problem problem = read_problem(argv[0]);
    std::vector<std::int64_t> header;
    const std::vector<double> x0 = read_doubles(argv[1], header, 1);
    const double t1 = std::stod(argv[2]), rtol = std::stod(argv[3]), atol = std::stod(argv[4]);
    const double kp = std::stod(argv[5]), kd = std::stod(argv[6]), dt0 = std::stod(argv[7]);
    const int saves = std::stoi(argv[8]), repeats = std::stoi(argv[9]);
    const double accuracy = std::stod(argv[10]), mu = std::stod(argv[11]);
    const int max_iter = std::stoi(argv[12]);
    const std::string trajectory_path = argv[13];
    const Eigen::Index n = problem.model.nv;
    if (problem.model.nq != n)
      throw std::runtime_error("simulate: only models with nq == nv (no quaternions)");
    if (header[0] != 2 * n || x0.size() != std::size_t(2 * n))
      throw std::runtime_error("initial state does not match the model");
    for (auto & c : problem.constraints)
    {
      c.baumgarte_corrector_parameters().Kp = kp;
      c.baumgarte_corrector_parameters().Kd = kd;
    }
    Data data(problem.model);
    ConstraintDatas datas = make_datas(problem.constraints);
    pin::ProximalSettings settings(accuracy, mu, max_iter);
    pin::initConstraintDynamics(problem.model, data, problem.constraints, datas);
    const Eigen::VectorXd tau = Eigen::VectorXd::Zero(n);
    long evaluations = 0;
    auto system = [&](const State & x, State & dxdt, double /*t*/) {
      ++evaluations;
      const Eigen::Map<const Eigen::VectorXd> q(x.data(), n), qd(x.data() + n, n);
      const auto & a = pin::constraintDynamics(
        problem.model, data, q, qd, tau, problem.constraints, datas, settings);
      std::copy(x.begin() + n, x.end(), dxdt.begin());
      std::copy(a.data(), a.data() + n, dxdt.begin() + n);
    };
    std::vector<double> ts(saves);
    for (int i = 0; i < saves; ++i)
      ts[i] = t1 * double(i) / double(saves - 1);
    Matrix saved(2 * n, saves);
    std::vector<double> times;
    std::size_t steps = 0;
    long evaluations_per_run = 0;
    for (int r = 0; r < std::max(repeats, 1); ++r)
    {
      State x(x0);
      int index = 0;
      evaluations = 0;
      auto stepper = odeint::make_dense_output(atol, rtol, odeint::runge_kutta_dopri5<State>());
      const auto start = Clock::now();
      steps = odeint::integrate_times(
        stepper, system, x, ts.begin(), ts.end(), dt0,
        [&](const State & y, double) {
          std::copy(y.begin(), y.end(), saved.col(index++).data());
        });
      times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      evaluations_per_run = evaluations;
    }
    Data check(problem.model);
    double max_position = 0.0, max_velocity = 0.0;
    for (int i = 0; i < saves; ++i)
    {
      const auto [position, velocity] =
        loop_residual(problem, check, saved.col(i).head(n), saved.col(i).tail(n));
      max_position = std::max(max_position, position);
      max_velocity = std::max(max_velocity, velocity);
    }
    write_doubles(trajectory_path, saved.data(), std::size_t(2 * n * saves));
    // dopri5 is first-same-as-last: one evaluation to start, then 6 per attempted step
    std::printf(
      "{\"steps\": %zu, \"evaluations\": %ld, \"attempted_steps\": %ld, \"run_s\": %.9g, "
      "\"max_loop_residual\": %.9g, \"max_velocity_residual\": %.9g, \"times_s\": %s}\n",
      steps, evaluations_per_run, (evaluations_per_run - 1) / 6, median(times), max_position,
      max_velocity, json_list(times).c_str());
    return 0;
  }

} // namespace

int main(int argc, char ** argv)
{
  try
  {
    pin_to_cpus(cpus_from_environment());
    Eigen::setNbThreads(1);
    const std::string command = argc > 1 ? argv[1] : "";
    if (command == "bench" && argc == 10)
      return bench(argv + 2);
    if (command == "simulate" && argc == 16)
      return simulate(argv + 2);
    std::fprintf(stderr, "usage: see the head of pinocchio_peer.cpp\n");
    return 2;
  }
  catch (const std::exception & e)
  {
    std::fprintf(stderr, "pinocchio_peer: %s\n", e.what());
    return 1;
  }
}
