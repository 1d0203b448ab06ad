// Pass: recognition of the odd-polynomial step X ← p(X·Xᵀ)·X, the fact the gram strategy needs.
//
// Each value of a step is tracked as one of three forms in A = X·Xᵀ (X the step's input):
//   poly     p(A)          (m x m)
//   poly_x   p(A)·X        (m x n)
//   xt_poly  Xᵀ·p(A)       (n x m)
// Sums stay in a form; products combine forms (p(A)X · Xᵀq(A) = p(A)·A·q(A), ...). Xᵀ·X (the
// n x n side) has no form here: gram works on the small Gram matrix X·Xᵀ.
#include <algorithm>
#include <string>

#include "passes/passes.h"

namespace orthojit::passes {
namespace {

using Polynomial = std::vector<double>;

Polynomial add(const Polynomial& p, const Polynomial& q, double sp, double sq) {
  Polynomial r(std::max(p.size(), q.size()), 0.0);
  for (size_t i = 0; i < p.size(); ++i) r[i] += sp * p[i];
  for (size_t i = 0; i < q.size(); ++i) r[i] += sq * q[i];
  return r;
}

Polynomial multiply(const Polynomial& p, const Polynomial& q, size_t shift = 0) {
  Polynomial r(p.size() + q.size() - 1 + shift, 0.0);
  for (size_t i = 0; i < p.size(); ++i)
    for (size_t j = 0; j < q.size(); ++j) r[i + j + shift] += p[i] * q[j];
  return r;
}

struct Form {
  enum class Kind { Unknown, Poly, PolyX, XtPoly };
  Kind kind = Kind::Unknown;
  Polynomial p;
  std::string reason;  // why Unknown
};

Form unknown(std::string reason) { return {Form::Kind::Unknown, {}, std::move(reason)}; }

Form product(const Form& a, const Form& b) {
  using K = Form::Kind;
  if (a.kind == K::Poly && b.kind == K::Poly) return {K::Poly, multiply(a.p, b.p), ""};
  if (a.kind == K::Poly && b.kind == K::PolyX) return {K::PolyX, multiply(a.p, b.p), ""};
  if (a.kind == K::PolyX && b.kind == K::XtPoly) return {K::Poly, multiply(a.p, b.p, 1), ""};
  if (a.kind == K::XtPoly && b.kind == K::Poly) return {K::XtPoly, multiply(a.p, b.p), ""};
  if (a.kind == K::XtPoly && b.kind == K::PolyX)
    return unknown("this statement forms Xᵀ·X (n x n), and the gram strategy works on R = X·Xᵀ; write the step with X @ X.T (X·q(XᵀX) = q(XXᵀ)·X)");
  return unknown("this statement has a product outside the forms p(A), p(A)·X and Xᵀ·p(A) with A = X·Xᵀ");
}

Form linear(std::vector<std::pair<double, const Form*>> terms, double gamma) {
  Form result;
  result.kind = terms.empty() ? Form::Kind::Poly : terms[0].second->kind;
  result.p = {0.0};
  for (auto& [coefficient, form] : terms) {
    if (form->kind != result.kind) return unknown("this statement adds values of different forms");
    result.p = add(result.p, form->p, 1.0, coefficient);
  }
  if (gamma != 0.0) {
    if (result.kind != Form::Kind::Poly) return unknown("this statement adds I to a value that is not a polynomial in X·Xᵀ");
    result.p = add(result.p, {gamma}, 1.0, 1.0);
  }
  return result;
}

}  // namespace

void recognize_odd_polynomial(ir::Function& function) {
  std::vector<Form> forms(function.nodes.size());
  for (size_t step = 0; step < function.steps.size(); ++step) {
    ir::StepInfo& info = function.steps[step];
    info.recognized = false;
    info.polynomial.clear();
    info.blocker = {};
    info.blocker_reason.clear();
    if (info.input < 0 || info.output < 0) continue;
    forms[static_cast<size_t>(info.input)] = {Form::Kind::PolyX, {1.0}, ""};
    const ir::Node* first_blocker = nullptr;
    std::string first_reason;
    for (size_t i = 0; i < function.nodes.size(); ++i) {
      const ir::Node& node = function.nodes[i];
      if (node.step != static_cast<int>(step) || static_cast<ir::NodeId>(i) == info.input) continue;
      auto operand_form = [&](size_t k) -> const Form& { return forms[static_cast<size_t>(node.operands[k])]; };
      Form form;
      bool operand_outside = false, operand_unknown = false;
      for (ir::NodeId id : node.operands) {
        operand_outside |= id != info.input && function.node(id).step != static_cast<int>(step);
        operand_unknown |= forms[static_cast<size_t>(id)].kind == Form::Kind::Unknown;
      }
      if (operand_outside) {
        form = unknown("this statement uses a value from outside the step");
      } else if (operand_unknown) {
        form = unknown("");  // inherits the blocker already reported
      } else if (node.kind == ir::OpKind::Transpose) {
        const Form& source = operand_form(0);
        form = source;
        if (source.kind == Form::Kind::PolyX) form.kind = Form::Kind::XtPoly;
        else if (source.kind == Form::Kind::XtPoly) form.kind = Form::Kind::PolyX;
      } else if (node.kind == ir::OpKind::Gemm) {
        Form ab = product(operand_form(0), operand_form(1));
        std::vector<std::pair<double, const Form*>> terms{{node.alpha, &ab}};
        if (node.operands.size() == 3) terms.emplace_back(node.beta, &operand_form(2));
        form = ab.kind == Form::Kind::Unknown ? ab : linear(terms, node.gamma);
      } else if (node.kind == ir::OpKind::LinComb) {
        std::vector<std::pair<double, const Form*>> terms;
        for (size_t k = 0; k < node.operands.size(); ++k) terms.emplace_back(node.coefficients[k], &operand_form(k));
        form = linear(terms, node.gamma);
      } else {
        form = unknown(std::string("this statement has a ") + ir::to_string(node.kind) + " inside the step");
      }
      if (form.kind == Form::Kind::Unknown && !form.reason.empty() && !first_blocker) {
        first_blocker = &node;
        first_reason = form.reason;
      }
      forms[i] = form;
    }
    const Form& result = forms[static_cast<size_t>(info.output)];
    if (result.kind == Form::Kind::PolyX) {
      info.recognized = true;
      info.polynomial = result.p;
      while (info.polynomial.size() > 1 && info.polynomial.back() == 0.0) info.polynomial.pop_back();
    } else if (first_blocker) {
      info.blocker = first_blocker->location;
      info.blocker_reason = first_reason;
    } else {
      info.blocker = function.node(info.output).location;
      info.blocker_reason = "the step's result is not of the form p(X·Xᵀ)·X";
    }
  }
}

}  // namespace orthojit::passes
